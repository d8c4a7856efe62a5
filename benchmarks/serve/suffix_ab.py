"""The suffix cache on or off over one agent load, alternating in one process (issue 64).

Replays the requests of a `dynaspec loadtest` record through the server's batch
(`ContinuousBatch`, as serve/engine.py drives it, without HTTP): each client sends its
requests one after another, a request joins when its client's previous one has left, at most
4 rows at once, every row in the one scope the load test's requests share. Each mode gets a
fresh cache (`SuffixCache()`, 64 MB) or none; the modes alternate (off, on, on, off per
repeat) so that the load of the moment on a shared machine falls on both alike. Per mode:
wall time (simulated with --oracle) and CPU time, batch rounds, rows' rounds and drafted
tokens per source, and the cache's own time (its lookups and additions, thread CPU time).

    python benchmarks/serve/suffix_ab.py RECORD.json             # the real pair (FLAGS)
    python benchmarks/serve/suffix_ab.py RECORD.json --pair tiny  # the code path, no download
    python benchmarks/serve/suffix_ab.py RECORD.json --oracle     # no model at all

`--oracle` replaces the target with one whose logits point at the record's own output tokens
and the clock with a simulated one (a forward costs STEP_S + TOKEN_S per token fed): every
output is the record's and the policy's decisions are deterministic, so the two modes'
decisions can be compared round by round and their simulated times tell what the cache's
choices cost or save, apart from any machine's noise.
"""

from __future__ import annotations

import argparse
import json
import time
import types
from collections import Counter
from typing import Any

import torch

from dynaspec import continuous
from dynaspec.core import batch_loop, timing
from dynaspec.core.config import SpecConfig
from dynaspec.drafters import prompt_lookup, suffix
from dynaspec.drafters.suffix_cache import SuffixCache

FLAGS = ["--static", "--draft-quantize", "w4a8", "--prompt-lookup", "32"]  # --fast's choice
TINY_FLAGS = ["--static", "--draft-quantize", "int8", "--prompt-lookup", "32"]  # (64 wide)
STEP_S, TOKEN_S = 0.08, 0.007  # the oracle's simulated forward: about the real pair's
SPENT: Counter[str] = Counter()  # the cache's thread CPU seconds, by method


def _timed(name: str, method: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            SPENT[name] += time.thread_time() - start

    return wrapper


SuffixCache.lookup = _timed("lookup", SuffixCache.lookup)  # type: ignore[method-assign]
SuffixCache.add = _timed("add", SuffixCache.add)  # type: ignore[method-assign]


def replay(
    target: Any,
    draft: Any,
    clients: list[list[list[int]]],
    cache: SuffixCache | None,
    new_tokens: int,
    eos: int | None = None,
    spec: SpecConfig | None = None,
) -> dict[str, Any]:
    """The clients' prompts through one ContinuousBatch (as `dynaspec serve` makes it, with
    prompt lookup 32); its rounds and time."""
    SPENT.clear()
    batch = continuous.ContinuousBatch(target, draft, spec, 32, suffix_cache=cache)
    queues = [list(prompts) for prompts in clients]
    owner: dict[int, int] = {}  # id(row) -> client
    decisions, outputs, rounds = [], [], 0
    settings = {"max_new_tokens": new_tokens, "do_sample": False}
    if eos is not None:
        settings["eos_token_id"] = eos
    started, cpu = continuous.time.perf_counter(), time.thread_time()
    while any(queues) or batch.rows:
        for client, queue in enumerate(queues):
            if queue and client not in owner.values() and len(batch.rows) < 4:
                prompt = queue.pop(0)
                row = batch.make_row(prompt, settings)
                owner[id(row)] = client
                batch.join(row, prompt)
        clients_now = [owner[id(row)] for row in batch.rows]
        records = batch.step()
        rounds += 1
        for client, record in zip(clients_now, records, strict=True):
            if record is not None:
                source = record.plan.source.name.lower() if record.num_copied else "model"
                source = source if record.num_drafted else "none"
                decisions.append((client, source, record.num_drafted, record.num_accepted))
        for row in batch.leave(lambda row: row.done):
            outputs.append(row.tokens[row.start : row.length].tolist())
            del owner[id(row)]
    drafted: Counter[str] = Counter()
    for _, source, count, _ in decisions:
        drafted[source] += count
    return {
        "wall_s": continuous.time.perf_counter() - started,  # --oracle: simulated
        "cpu_s": time.thread_time() - cpu,  # this thread's (--oracle: all of it Python's)
        "batch_rounds": rounds,
        "row_rounds": Counter(d[1] for d in decisions),
        "drafted": drafted,
        "accepted": sum(d[3] for d in decisions),
        "cache_ms": {name: round(seconds * 1e3, 1) for name, seconds in SPENT.items()},
        "decisions": decisions,
        "outputs": outputs,
    }


class OracleTarget:
    """A batch adapter whose logits at position p point at token p + 1 of the row's record
    (prompt and output); each forward advances the simulated clock."""

    packs_rows = True
    max_length = 1 << 16

    def __init__(self, vocab_size: int, eos: int, texts: dict[tuple[int, ...], list[int]]):
        self.vocab_size, self.eos, self.texts = vocab_size, eos, texts
        self.num_cached: list[int] = []
        self.num_pads: list[int] = []
        self.fed: list[list[int]] = []
        self.refs: list[list[int]] = []
        self.clock = 0.0

    def bytes_per_token(self) -> int:
        return 1

    def prefill(self, tokens: torch.Tensor, own: Any = None) -> Any:
        self.clock += TOKEN_S * tokens.numel()
        return (own or []) + tokens.tolist()

    def join(self, prompt: torch.Tensor, own: Any = None) -> None:
        self.fed.append(list(own) if own is not None else prompt[:-1].tolist())
        self.refs.append(self.texts[tuple(prompt.tolist())])
        self.num_cached.append(len(self.fed[-1]))
        self.num_pads.append(0)

    def leave(self, keep: list[int]) -> None:
        self.fed = [self.fed[row] for row in keep]
        self.refs = [self.refs[row] for row in keep]
        self.num_cached = [len(fed) for fed in self.fed]
        self.num_pads = [0] * len(keep)

    def crop(self, num_tokens: list[int]) -> None:
        self.fed = [fed[:n] for fed, n in zip(self.fed, num_tokens, strict=True)]
        self.num_cached = [len(fed) for fed in self.fed]

    def forward(self, new_tokens: list[torch.Tensor], num_logits: list[int]) -> list[torch.Tensor]:
        self.clock += STEP_S + TOKEN_S * sum(feed.numel() for feed in new_tokens)
        out = []
        for row, (feed, wanted) in enumerate(zip(new_tokens, num_logits, strict=True)):
            self.fed[row].extend(feed.tolist())
            self.num_cached[row] = len(self.fed[row])
            ref, end = self.refs[row], len(self.fed[row])
            logits = torch.zeros(wanted, self.vocab_size)
            for index, position in enumerate(range(end - wanted, end)):
                logits[index, ref[position + 1] if position + 1 < len(ref) else self.eos] = 9.0
            out.append(logits)
        return out


def oracle_models(record: dict[str, Any]) -> tuple[Any, int]:
    """A tiny stand-in model (its config: the vocabulary, EOS) whose batch adapter is an
    OracleTarget, every clock the batch reads the oracle's; returns it and the EOS id."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    requests = [request for run in record["requests"] for request in run]
    eos = next(r["token_ids"][-1] for r in requests if r["finish_reason"] == "stop")
    vocab = 1 + max(max(r["prompt_token_ids"] + r["token_ids"]) for r in requests)
    texts = {tuple(r["prompt_token_ids"]): r["prompt_token_ids"] + r["token_ids"] for r in requests}
    oracle = OracleTarget(vocab, eos, texts)
    config = Qwen2Config(vocab_size=vocab, hidden_size=8, intermediate_size=16,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=1 << 16, eos_token_id=eos)  # fmt: skip
    model = Qwen2ForCausalLM(config).eval()
    now = types.SimpleNamespace(perf_counter=lambda: oracle.clock, time=time.time)
    for module in (batch_loop, timing, suffix, prompt_lookup):
        module.perf_counter = now.perf_counter  # type: ignore[attr-defined]
    continuous.time = now  # type: ignore[attr-defined]
    continuous.batch_adapter = lambda target: oracle  # type: ignore[assignment]
    return model, eos


def clients_of(record: dict[str, Any], tokenizer: Any = None) -> list[list[list[int]]]:
    """Per client its requests' prompt ids, in order (re-rendered by `tokenizer`, the last
    1000 tokens, where given: another model's vocabulary)."""
    requests = [request for run in record["requests"] for request in run]
    count = 1 + max(r["client"] for r in requests)
    ordered = sorted(requests, key=lambda r: (r["client"], r["index"]))
    if tokenizer is None:
        return [[r["prompt_token_ids"] for r in ordered if r["client"] == c] for c in range(count)]
    encode = tokenizer.encode
    return [
        [encode(r["prompt"])[-1000:] for r in ordered if r["client"] == c] for c in range(count)
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("record", help="a loadtest record (loadtest-LABEL.json)")
    p.add_argument("--oracle", action="store_true", help="no model: the record's own outputs")
    p.add_argument("--pair", help="a model pair other than the record's (e.g. tiny)")
    p.add_argument("--repeats", type=int, default=1, help="off, on, on, off this many times")
    p.add_argument("--max-tokens", type=int, default=256)
    args = p.parse_args()
    with open(args.record) as file:
        record = json.load(file)
    eos, settings = None, None
    if args.oracle:
        target, eos = oracle_models(record)
        draft, clients = None, clients_of(record)
    else:
        from dynaspec.cli import build_parser
        from dynaspec.models.arguments import (
            apply_fast_choice,
            fast_options,
            load_named_from_arguments,
        )
        from dynaspec.serve.args import spec

        pair = ["--pair", args.pair] if args.pair else []
        flags = TINY_FLAGS if args.pair == "tiny" else FLAGS
        parsed = build_parser().parse_args(["serve", *pair, *flags])
        settings = spec(parsed)
        apply_fast_choice(parsed)
        models = load_named_from_arguments(parsed, **fast_options(parsed))
        target, draft = models.target, models.draft
        clients = clients_of(record, models.tokenizer if args.pair == "tiny" else None)
    results: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for _ in range(args.repeats):
        for mode in ("off", "on", "on", "off"):
            cache = SuffixCache() if mode == "on" else None
            result = replay(target, draft, clients, cache, args.max_tokens, eos, settings)
            results[mode].append(result)
            shown = {k: v for k, v in result.items() if k not in ("decisions", "outputs")}
            print(mode, {k: dict(v) if isinstance(v, Counter) else v for k, v in shown.items()})
    off, on = results["off"][0], results["on"][0]
    same = sum(a == b for a, b in zip(off["decisions"], on["decisions"], strict=False))
    first = next(
        (
            i
            for i, (a, b) in enumerate(zip(off["decisions"], on["decisions"], strict=False))
            if a != b
        ),
        None,
    )
    print(
        f"outputs equal: {sorted(map(tuple, off['outputs'])) == sorted(map(tuple, on['outputs']))}"
    )
    print(f"row rounds decided alike: the first {first if first is not None else same} "
          f"({same} of {len(off['decisions'])} off, {len(on['decisions'])} on)")  # fmt: skip
    walls = {mode: min(r["wall_s"] for r in runs) for mode, runs in results.items()}
    print(f"best wall: off {walls['off']:.2f} s, on {walls['on']:.2f} s, "
          f"on/off {walls['on'] / walls['off']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
