"""The agent task: sessions of several turns over one piece of code, as a coding agent sends
them (issue 64). Each HumanEval problem makes a session of three turns, each a request of its
own that sends the code again: write the function; fix it against the tests the user pastes;
add type hints and a docstring. The canonical solution stands in for the code the assistant
wrote in the turn before (the prompts are fixed before any model runs), so what repeats
across turns is the function itself: the suffix cache drafts a later turn's function from an
earlier turn's output, prompt lookup from the code the turn quotes.

In `load_prompts("agent", n)` a session's turns are consecutive, so a load-test client whose
requests are 3 consecutive prompts (`dynaspec loadtest --task agent --requests 3`) runs one
session, turn after turn; sessions are sampled by the seed as whole sessions.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TURNS = 3  # requests per session
WRITE = (
    "Complete the following Python function. Reply with the complete function in a single "
    "Python code block.\n\n```python\n{prompt}```"
)
FIX = (
    "Here is my function:\n\n```python\n{code}```\n\nThese tests must pass:\n\n"
    "```python\n{test}```\n\nFix the function if any of them fails. Reply with the complete "
    "function in a single Python code block."
)
POLISH = (
    "Here is the function:\n\n```python\n{code}```\n\nAdd type hints and a docstring that "
    "explains the arguments. Reply with the complete function in a single Python code block."
)


def agent_sessions(path: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """[(problem id, [(turn id, user message), ...])] from HumanEval's file, in file order."""
    with gzip.open(path, "rt", encoding="utf-8") as file:
        problems = [json.loads(line) for line in file if line.strip()]
    sessions = []
    for problem in problems:
        ident, code = problem["task_id"], problem["prompt"] + problem["canonical_solution"]
        messages = (
            WRITE.format(prompt=problem["prompt"]),
            FIX.format(code=code, test=problem["test"].strip() + "\n"),
            POLISH.format(code=code),
        )
        sessions.append((ident, [(f"{ident}/turn{k + 1}", m) for k, m in enumerate(messages)]))
    return sessions
