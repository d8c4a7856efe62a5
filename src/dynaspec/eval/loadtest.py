"""`dynaspec loadtest`: concurrent clients against `dynaspec serve` (started here, in this
process, on loopback) or against another OpenAI-compatible server (`--url`, e.g. a peer),
with the same prompts and settings; every output compared with its prompt decoded alone.

For each number of clients (`--clients 1,2,4,8`) every client sends `--requests` requests one
after another (eval/load.py: bounded in count and time; lost requests are counted). Before
the timed runs, one untimed request warms the server up. The record: requests completed,
failed, lost; time to first token p50/p95; tokens per second per client and in total; how
many outputs equal the target alone's greedy output for the same prompt, and why each other
one differs: the server sends its token ids back (`return_token_ids`, vLLM's field) and the
first differing token is classified as `generate --compare` does it (a tie or a BUG; a BUG
makes the command fail).

`--task agent-retry` (eval/agent.py): with 6 requests per client, each client runs a session
of three turns, then the retry of the next client's session once that session has ended
(`retry_plan`), every timed client presenting one API key, so the retry may draft from the
first attempt's replies in the server's suffix cache.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import sys
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dynaspec.core.config import DEFAULT_SCHEDULE
from dynaspec.drafters.suffix_cache import DEFAULT_SIZE_MB
from dynaspec.errors import ConfigError
from dynaspec.eval.agent import ATTEMPT, RETRY_TASK, TURNS, retry_plan
from dynaspec.eval.provenance import git_state, library_versions, machine_info
from dynaspec.models.arguments import (
    add_fast_arguments,
    add_model_arguments,
    apply_fast_choice,
    check_model_arguments,
    counts,
    fast_choice_line,
    fast_options,
    float_in,
    int_at_least,
    load_from_arguments,
)
from dynaspec.policies import SCHEDULES
from dynaspec.serve.args import SERVER_MODULES, check_decoding_arguments, model_name, require, spec

if TYPE_CHECKING:
    from dynaspec.eval.load import LoadResult

WARM_UP_KEY = "loadtest-warm-up"  # the warm-up request's key: a suffix cache scope of its own
SMOKE_PROMPTS = ("def fib(n):", "class Stack:\n    def push(self, x):", "x = [1, 2", "import os")


def add_loadtest_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, float32_case="the tiny pair")
    # the server's fast path, chosen as `dynaspec serve` chooses it (--fast auto) unless the
    # flags say; the outputs are compared with its target's
    add_fast_arguments(p, auto=True)
    p.add_argument("--clients", default="1,2,4", help="numbers of concurrent clients, e.g. 1,2,4,8")
    p.add_argument("--requests", type=int_at_least(1), default=2, help="requests per client")
    p.add_argument("--max-tokens", type=int_at_least(1), default=128)
    p.add_argument(
        "--task",
        default="all",
        help="bench prompt set (summarization, code, ..., agent, agent-retry: eval/agent.py)",
    )
    p.add_argument(
        "--prompt-seed",
        type=int,
        default=1,
        help="which sample of the prompt set (the bench's committed runs use seed 0)",
    )
    p.add_argument("--max-batch", type=int_at_least(1), default=4)
    p.add_argument("--prompt-lookup", type=int_at_least(1), default=None, metavar="N")
    p.add_argument(
        "--suffix-cache",
        type=float_in(0.0, math.inf),
        default=DEFAULT_SIZE_MB,
        metavar="MB",
        help="the server's suffix cache, as serve's (0: off); one server serves every "
        "--clients count in turn, so with the cache on, measure one count per run",
    )
    p.add_argument("--no-draft", action="store_true", help="serve the target alone")
    p.add_argument("--schedule", default=DEFAULT_SCHEDULE, choices=tuple(SCHEDULES))
    p.add_argument("--num-assistant-tokens", type=int_at_least(1), default=20)
    p.add_argument("--threshold", type=float, default=0.4)
    p.add_argument("--url", help="an OpenAI-compatible server to test instead (no comparison)")
    p.add_argument(
        "--no-compare",
        action="store_true",
        help="skip decoding each prompt with the target alone to compare the outputs",
    )
    p.add_argument("--model", help="with --url: the model name to send")
    p.add_argument("--timeout", type=float, default=3600, help="deadline of each run, seconds")
    p.add_argument("--out", default="benchmarks/serve", help="folder for loadtest.json/.md")
    p.add_argument("--label", default=None, help="names the result files (loadtest-LABEL.*)")
    p.add_argument(
        "--smoke", action="store_true", help="tiny pair, 1,2 clients, 8 tokens, built-in prompts"
    )
    p.set_defaults(func=run_loadtest, check=lambda args: _check(p, args))


def _check(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.smoke:
        args.pair, args.clients, args.max_tokens, args.requests = "tiny", "1,2", 8, 2
    _check_retry(p, args)
    if args.url is not None:
        if args.model is None:
            p.error("--url needs --model: the name that server serves")
        return
    check_model_arguments(p, args)
    check_decoding_arguments(p, args)
    try:
        args.client_counts = _counts(args.clients)
    except ConfigError as error:
        p.error(str(error))


def _check_retry(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """agent-retry alone, and --requests in whole rounds of a session and a retry."""
    names = [name.strip() for name in args.task.split(",")]
    if RETRY_TASK in names and len(names) > 1:
        p.error(f"--task {RETRY_TASK} orders the clients' requests: name it alone")
    if RETRY_TASK in names and args.requests % ATTEMPT:
        p.error(
            f"--task {RETRY_TASK} needs --requests in multiples of {ATTEMPT} (a "
            f"session's {TURNS} turns, then the retry of another's), got {args.requests}"
        )


def _counts(text: str) -> tuple[int, ...]:
    return counts(text, "--clients")


def _prompts(args: argparse.Namespace, count: int) -> tuple[str, ...]:
    """The task's prompts; the built-in short ones for --smoke and for the tiny pair unless
    a --task is named (then its prompts, as the real pair gets them: a smoke run of that
    task's path)."""
    if args.smoke or (args.pair == "tiny" and args.task == "all"):
        return SMOKE_PROMPTS
    from dynaspec.eval.data import load_prompts

    return tuple(p.text for p in load_prompts(args.task, count, seed=args.prompt_seed))


def run_loadtest(args: argparse.Namespace) -> int:
    require(*(("openai",) if args.url is not None else (*SERVER_MODULES, "openai")))
    args.git_at_start = git_state()  # the code that runs (the files may change meanwhile)
    args.started_at = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    counts = args.client_counts if hasattr(args, "client_counts") else _counts(args.clients)
    prompts = _prompts(args, max(counts) * args.requests)
    if args.url is not None:
        results = _runs(args.url, args.model, counts, prompts, args)
        return _write(args, results, None)
    from dynaspec.serve.config import ServeConfig
    from dynaspec.serve.engine import on_passing_thread
    from dynaspec.serve.run import build_app, in_thread

    choice = apply_fast_choice(args)  # as `dynaspec serve` does
    if choice is not None:
        print(fast_choice_line(choice, args), file=sys.stderr, flush=True)
    # loaded as `dynaspec serve` loads: the engine thread's torch workers the only ones
    target, draft, tokenizer = on_passing_thread(
        lambda: load_from_arguments(args, **fast_options(args))
    )
    name = model_name(args)
    config = ServeConfig(
        model_name=name,
        port=0,
        max_batch=args.max_batch,
        max_queue=64,
        suffix_cache_mb=args.suffix_cache,
    )
    app = build_app(target, draft, tokenizer, config, spec(args), args.prompt_lookup)
    with in_thread(app) as url:
        results = _runs(
            url, name, counts, prompts, args, token_ids=not args.no_compare, own_server=True
        )
    alone = None if args.no_compare else _alone(target, tokenizer, results, args.max_tokens)
    return _write(args, results, alone, target)


def _runs(
    url: str,
    model: str,
    counts: tuple[int, ...],
    prompts: tuple[str, ...],
    args: Any,
    token_ids: bool = False,
    own_server: bool = False,
) -> list[LoadResult]:
    """The timed runs, one per client count, after an untimed warm-up request. On the
    server started here the warm-up presents a key of its own, so its text lands in a suffix
    cache scope of its own and never drafts the timed requests (the scope follows the key:
    docs/serve.md); a peer gets the clients' key."""
    from dynaspec.eval.load import LoadConfig, run_load, table

    base = dict(
        base_url=url + "/v1",
        model=model,
        max_tokens=args.max_tokens,
        prompts=prompts,
        timeout_s=args.timeout,
        token_ids=token_ids,  # the server's ids, to classify any output that differs
    )
    warm_up = {**base, "max_tokens": 8, **({"api_key": WARM_UP_KEY} if own_server else {})}
    run_load(LoadConfig(clients=1, requests_per_client=1, **warm_up))
    results = []
    for clients in counts:
        print(f"loadtest: {clients} client(s) x {args.requests} requests", file=sys.stderr)
        plan = {**base, **_plan(args.task, prompts, clients, args.requests)}
        result = run_load(LoadConfig(clients=clients, requests_per_client=args.requests, **plan))
        print(table([result]).splitlines()[-1], file=sys.stderr, flush=True)
        results.append(result)
    return results


def _plan(task: str, prompts: tuple[str, ...], clients: int, requests: int) -> dict[str, Any]:
    """The run's prompts and waits: agent-retry's in `retry_plan`'s order (one key for all
    the clients: the LoadConfig's), any other task's as they come."""
    if task != RETRY_TASK:
        return {}
    ordered, waits = retry_plan(prompts, clients, requests)
    return {"prompts": ordered, "waits": waits}


@dataclass(frozen=True)
class Alone:
    """A prompt decoded by the target alone: its ids (as the server renders the chat
    request), the new ids and their text."""

    prompt_ids: torch.Tensor  # (1, T)
    new_ids: tuple[int, ...]
    text: str


def _alone(target: Any, tokenizer: Any, results: list[LoadResult], max_tokens: int) -> dict:
    """Each completed request's prompt's greedy output from the target alone (generate()
    without a draft), rendered as the server renders a chat request: {prompt: Alone}. A
    prompt no request completed is not decoded (the server refused it: too long, ...)."""
    from dynaspec.generation import generate
    from dynaspec.prompts import render_prompt

    alone = {}
    for prompt in sorted({r.prompt for result in results for r in result.results if r.ok}):
        ids = render_prompt(tokenizer, prompt, chat=True)
        out = generate(target, None, ids, max_new_tokens=max_tokens)
        new = out.sequences[0, ids.shape[1] :]
        text = tokenizer.decode(new, skip_special_tokens=True)
        alone[prompt] = Alone(ids, tuple(new.tolist()), text)
    return alone


def differing(target: Any, result: LoadResult, alone: dict[str, Alone]) -> list[dict[str, Any]]:
    """The completed requests whose text differs from the target alone's, each with where
    its tokens part and why (`dynaspec/mismatch.py`: a tie or a BUG), from the ids the server
    sent back; "unknown" where it sent none."""
    from dynaspec.mismatch import classify_mismatch, first_difference

    found = []
    for r in result.results:
        if not r.ok:
            continue
        reference = alone[r.prompt]
        if r.text == reference.text:
            continue
        entry: dict[str, Any] = {"prompt": r.prompt[:60], "kind": "unknown"}
        ids = r.token_ids
        if ids is not None and first_difference(reference.new_ids, ids) is not None:
            why = classify_mismatch(target, reference.prompt_ids, reference.new_ids, ids)
            entry.update(kind=why.kind, position=why.position, steps=why.steps)
        elif ids is not None:  # the same tokens, another text (a stop sequence's cut)
            entry["kind"] = "same tokens"
        found.append(entry)
    return found


def _write(
    args: Any, results: list[LoadResult], alone: dict[str, Alone] | None, target: Any = None
) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "loadtest" + (f"-{args.label}" if args.label else "")
    runs = []
    for result in results:
        summary = result.summary()
        summary["sources"] = source_totals(result)
        if alone is not None:
            ok = [r for r in result.results if r.ok]
            differ = differing(target, result, alone)
            summary.update(equal_to_target_alone=len(ok) - len(differ), differing=differ)
        runs.append(summary)
    record = {
        "command": " ".join(sys.argv),
        "config": {
            k: asdict(v) if is_dataclass(v) else v
            for k, v in vars(args).items()
            if k not in ("func", "check", "git_at_start", "started_at")
        },
        "started_at": getattr(args, "started_at", None),
        "machine": machine_info(),
        "versions": library_versions(),
        "git": args.git_at_start,
        "runs": runs,
        "requests": [[asdict(r) for r in result.results] for result in results],
    }
    (out / f"{stem}.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    from dynaspec.eval.load import table

    lines = [table(results)]
    if alone is not None:
        lines.append("")
        lines += [
            f"- {s['clients']} client(s): {s['equal_to_target_alone']} of {s['completed']} "
            "outputs equal the target alone's" + _differing_words(s["differing"])
            for s in runs
        ]
    lines += [f"- {s['clients']} client(s), tokens drafted: {_source_words(s)}" for s in runs]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    lost = sum(result.lost for result in results)
    bugs = [d for s in runs for d in s.get("differing", ()) if d["kind"] == "BUG"]
    return 1 if lost or bugs else 0


def source_totals(result: LoadResult) -> dict[str, dict[str, int]]:
    """Per draft source ("lookup", "suffix", "model"), the rounds, drafted and accepted
    tokens summed over the run's completed requests (their `dynaspec` stats; empty for a
    peer that sends none)."""
    totals: dict[str, dict[str, int]] = {}
    for r in result.results:
        sources = (r.extra or {}).get("sources") or {} if r.ok else {}
        for name, source in sources.items():
            entry = totals.setdefault(name, {"rounds": 0, "drafted": 0, "accepted": 0})
            for key in entry:
                entry[key] += int(source.get(key) or 0)
    return totals


def _source_words(summary: dict[str, Any]) -> str:
    """ "lookup 12 (9 accepted), suffix 40 (38 accepted), model 0" for the .md record."""
    parts = [
        f"{name} {c['drafted']}" + (f" ({c['accepted']} accepted)" if c["drafted"] else "")
        for name, c in summary["sources"].items()
    ]
    return ", ".join(parts) or "no per-source stats (a peer)"


def _differing_words(differ: list[dict[str, Any]]) -> str:
    """ "; 2 differ: 2 at a tie" (with the BUGs' prompts named)."""
    if not differ:
        return ""
    kinds: dict[str, int] = {}
    for entry in differ:
        kinds[entry["kind"]] = kinds.get(entry["kind"], 0) + 1
    words = ", ".join(f"{count} {_KIND_WORDS.get(kind, kind)}" for kind, count in kinds.items())
    bugs = [entry["prompt"] for entry in differ if entry["kind"] == "BUG"]
    return f"; {len(differ)} differ: {words}" + (f" (BUG: {bugs})" if bugs else "")


_KIND_WORDS = {
    "tie": "at a tie (either token is the target's argmax within its dtype's precision)",
    "BUG": "not at a tie (a BUG)",
    "unknown": "unclassified (the server sent no token ids)",
    "same tokens": "with the same tokens",
}
