"""The agent tasks: sessions of several turns over one piece of code, as a coding agent sends
them (issue 64).

`agent`: each HumanEval problem makes a session of three turns, each a request of its own
that sends the code again: write the function; fix it against the tests the user pastes; add
type hints and a docstring. The canonical solution stands in for the code the assistant
wrote in the turn before (the prompts are fixed before any model runs), so what repeats
across turns is the function itself: the suffix cache drafts a later turn's function from an
earlier turn's output, prompt lookup from the code the turn quotes. In
`load_prompts("agent", n)` a session's turns are consecutive, so a load-test client whose
requests are 3 consecutive prompts (`dynaspec loadtest --task agent --requests 3`) runs one
session, turn after turn; sessions are sampled by the seed as whole sessions.

`agent-retry`: every session is attempted twice, as agent fleets do (a retry after a failed
run, a second sample for pass@k, a second agent redoing the work to compare). Since every
turn of `agent` re-sends the conversation, prompt lookup finds in the prompt most of what a
suffix cache would copy; what only the cache can give is text that repeats across sessions
but is not in the current prompt: here, the first attempt's replies, which the retry's
prompts never quote. The retry sends the same three turns, each opened by `RETRY_NOTE`: an
identical prompt would make a greedy target repeat the first attempt's reply token for token
(the cache's best case, not a retry's); with the note, the retry's replies are the target's
own for another prompt, and the cache gains as far as the two attempts' replies agree. In
`load_prompts("agent-retry", n)` each session's three turns are followed by its retry's three.

`retry_plan` lays those out for `dynaspec loadtest --task agent-retry` (eval/loadtest.py):
with C clients and 6 requests per client, client k runs session k, then the retry of session
(k + 1) mod C, which starts only once client (k + 1) mod C's last turn of that session has
ended (LoadConfig.waits): another client of the same fleet retries a finished session. All
timed clients present one API key, so the server's suffix cache (scoped per key by default,
docs/serve.md) holds the first attempt's prompts and replies when the retry is sent (a row's
text is added as it leaves the batch, before its reply's last chunk is sent). With 12, 18,
... requests per client each client does that again for the next C sessions.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from dynaspec.errors import ConfigError

RETRY_TASK = "agent-retry"  # its name in load_prompts and `dynaspec loadtest --task`
TURNS = 3  # requests per session
ATTEMPT = 2 * TURNS  # agent-retry: a session's requests, first attempt and retry
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
RETRY_NOTE = "This task was attempted before and set aside; do it again from the start.\n\n"

Session = tuple[str, list[tuple[str, str]]]  # (problem id, [(turn id, user message), ...])
P = TypeVar("P")


def agent_sessions(path: Path) -> list[Session]:
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


def with_retry(session: Session) -> Session:
    """The session's turns, then its retry's: the same turns opened by RETRY_NOTE."""
    ident, turns = session
    retry = [(f"{ident}/retry/{turn.rsplit('/', 1)[1]}", RETRY_NOTE + m) for turn, m in turns]
    return ident, turns + retry


def retry_plan(
    prompts: Sequence[P], clients: int, requests: int
) -> tuple[tuple[P, ...], tuple[tuple[tuple[int, int], tuple[int, int]], ...]]:
    """The prompts of `clients` clients of `requests` requests each, client after client (as
    LoadConfig.prompt_for reads them), and the waits: ((client, index), (client, index)),
    the first request sent only once the second has ended. `prompts` are agent-retry's
    (per session its turns, then its retry's); in round r client k runs session r*C + k's
    turns, then the retry of session r*C + (k + 1) mod C, after that session's last turn."""
    if requests % ATTEMPT:
        raise ConfigError(
            f"agent-retry needs requests per client in multiples of {ATTEMPT} (a session's "
            f"{TURNS} turns, then another session's retry), got {requests}"
        )
    rounds = requests // ATTEMPT
    if len(prompts) < clients * requests:
        raise ConfigError(
            f"agent-retry with {clients} clients x {requests} requests needs "
            f"{clients * requests} prompts, got {len(prompts)}"
        )
    sessions = [prompts[at : at + ATTEMPT] for at in range(0, clients * requests, ATTEMPT)]
    ordered: list[P] = []
    waits = []
    for k in range(clients):
        other = (k + 1) % clients
        for r in range(rounds):
            ordered += [*sessions[r * clients + k][:TURNS], *sessions[r * clients + other][TURNS:]]
            waits.append(((k, r * ATTEMPT + TURNS), (other, r * ATTEMPT + TURNS - 1)))
    return tuple(ordered), tuple(waits)
