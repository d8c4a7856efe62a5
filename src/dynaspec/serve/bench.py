"""`dynaspec loadtest`: concurrent clients against `dynaspec serve` (started here, in this
process, on loopback) or against another OpenAI-compatible server (`--url`, e.g. a peer),
with the same prompts and settings; every output compared with its prompt decoded alone.

For each number of clients (`--clients 1,2,4,8`) every client sends `--requests` requests one
after another (eval/load.py: bounded in count and time; lost requests are counted). Before
the timed runs, one untimed request warms the server up. The record: requests completed,
failed, lost; time to first token p50/p95; tokens per second per client and in total; how
many outputs equal the target alone's greedy output for the same prompt.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynaspec.core.config import DEFAULT_SCHEDULE
from dynaspec.errors import ConfigError
from dynaspec.eval.provenance import git_state, library_versions, machine_info
from dynaspec.models.arguments import (
    add_model_arguments,
    check_model_arguments,
    counts,
    int_at_least,
    load_from_arguments,
)
from dynaspec.policies import SCHEDULES
from dynaspec.serve.args import SERVER_MODULES, check_decoding_arguments, model_name, require, spec

if TYPE_CHECKING:
    from dynaspec.eval.load import LoadResult

SMOKE_PROMPTS = ("def fib(n):", "class Stack:\n    def push(self, x):", "x = [1, 2", "import os")


def add_loadtest_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, float32_case="the tiny pair")
    p.add_argument("--clients", default="1,2,4", help="numbers of concurrent clients, e.g. 1,2,4,8")
    p.add_argument("--requests", type=int_at_least(1), default=2, help="requests per client")
    p.add_argument("--max-tokens", type=int_at_least(1), default=128)
    p.add_argument("--task", default="all", help="bench prompt set (summarization, code, ...)")
    p.add_argument(
        "--prompt-seed",
        type=int,
        default=1,
        help="which sample of the prompt set (the bench's committed runs use seed 0)",
    )
    p.add_argument("--max-batch", type=int_at_least(1), default=4)
    p.add_argument("--prompt-lookup", type=int_at_least(1), default=None, metavar="N")
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


def _counts(text: str) -> tuple[int, ...]:
    return counts(text, "--clients")


def _prompts(args: argparse.Namespace, count: int) -> tuple[str, ...]:
    if args.smoke or args.pair == "tiny":
        return SMOKE_PROMPTS
    from dynaspec.eval.data import load_prompts

    return tuple(p.text for p in load_prompts(args.task, count, seed=args.prompt_seed))


def run_loadtest(args: argparse.Namespace) -> int:
    require(*(("openai",) if args.url is not None else (*SERVER_MODULES, "openai")))
    args.git_at_start = git_state()  # the code that runs (the files may change meanwhile)
    counts = args.client_counts if hasattr(args, "client_counts") else _counts(args.clients)
    prompts = _prompts(args, max(counts) * args.requests)
    if args.url is not None:
        results = _runs(args.url, args.model, counts, prompts, args)
        return _write(args, results, None)
    from dynaspec.serve.config import ServeConfig
    from dynaspec.serve.run import build_app, in_thread

    target, draft, tokenizer = load_from_arguments(args)
    name = model_name(args)
    config = ServeConfig(model_name=name, port=0, max_batch=args.max_batch, max_queue=64)
    app = build_app(target, draft, tokenizer, config, spec(args), args.prompt_lookup)
    with in_thread(app) as url:
        results = _runs(url, name, counts, prompts, args)
    alone = None if args.no_compare else _alone_texts(target, tokenizer, results, args.max_tokens)
    return _write(args, results, alone)


def _runs(
    url: str, model: str, counts: tuple[int, ...], prompts: tuple[str, ...], args: Any
) -> list[LoadResult]:
    from dynaspec.eval.load import LoadConfig, run_load, table

    base = dict(
        base_url=url + "/v1",
        model=model,
        max_tokens=args.max_tokens,
        prompts=prompts,
        timeout_s=args.timeout,
    )
    run_load(LoadConfig(clients=1, requests_per_client=1, **{**base, "max_tokens": 8}))  # warm-up
    results = []
    for clients in counts:
        print(f"loadtest: {clients} client(s) x {args.requests} requests", file=sys.stderr)
        result = run_load(LoadConfig(clients=clients, requests_per_client=args.requests, **base))
        print(table([result]).splitlines()[-1], file=sys.stderr, flush=True)
        results.append(result)
    return results


def _alone_texts(
    target: Any, tokenizer: Any, results: list[LoadResult], max_tokens: int
) -> dict[str, str]:
    """Each prompt's greedy output from the target alone (generate() without a draft),
    rendered as the server renders a chat request."""
    from dynaspec.eval.data import render_prompt
    from dynaspec.generation import generate

    texts = {}
    for prompt in sorted({r.prompt for result in results for r in result.results}):
        ids = render_prompt(tokenizer, prompt, chat=True)
        out = generate(target, None, ids, max_new_tokens=max_tokens)
        new = out.sequences[0, ids.shape[1] :]
        texts[prompt] = tokenizer.decode(new, skip_special_tokens=True)
    return texts


def _write(args: Any, results: list[LoadResult], alone: dict[str, str] | None) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "loadtest" + (f"-{args.label}" if args.label else "")
    runs = []
    for result in results:
        summary = result.summary()
        if alone is not None:
            ok = [r for r in result.results if r.ok]
            differ = [r.prompt[:60] for r in ok if r.text != alone[r.prompt]]
            summary.update(equal_to_target_alone=len(ok) - len(differ), differing=differ)
        runs.append(summary)
    record = {
        "command": " ".join(sys.argv),
        "config": {
            k: v for k, v in vars(args).items() if k not in ("func", "check", "git_at_start")
        },
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
            "outputs equal the target alone's"
            + (f"; differ: {s['differing']}" if s["differing"] else "")
            for s in runs
        ]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    lost = sum(result.lost for result in results)
    return 1 if lost else 0
