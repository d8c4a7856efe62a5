"""`dynaspec bench --batch 1,2,4,8`: throughput by batch size, every method on the same
batches of the same prompts.

The prompts are cut, in order, into batches of each size (the last one may be smaller);
every method decodes every batch, left-padded, after one untimed warm-up per method.
Throughput is the batch's new tokens (each row up to and including its EOS) over the call's
wall time; a row's latency is the call's wall time (every row waits for the batch). Each
dynaspec method's rows are compared with transformers' batched greedy output of the same
batch (or, without it, with its own target alone's: the fast methods with static-target's,
the others with target's); the integer targets' methods (w8a8-*, w4a8-*: int8 activations,
outputs of their own) only with their own target alone's. One JSON line per (batch size,
method, batch) goes to batch.jsonl; batch.md holds the throughput table (tokens per
second, and the ratio to dynaspec's batched target alone).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from dynaspec.errors import ConfigError
from dynaspec.eval.bench.fast import FAST_METHODS
from dynaspec.eval.bench.tables import markdown_table
from dynaspec.generation import generate
from dynaspec.models.arguments import counts
from dynaspec.prompts import left_padded

# method -> how it decodes a batch: (target, draft, ids, mask, max_new, eos, pad) -> ids
Decode = Callable[[Any, Any, torch.Tensor, torch.Tensor, int, list[int], int], torch.Tensor]


def _hf(target, draft, ids, mask, max_new, eos, pad) -> torch.Tensor:  # noqa: ANN001
    out = target.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=max_new,
        min_new_tokens=0,
        eos_token_id=eos or None,
        pad_token_id=pad,
    )
    return out[:, ids.shape[1] :]


def _dynaspec(**settings: Any) -> Decode:
    def run(target, draft, ids, mask, max_new, eos, pad) -> torch.Tensor:  # noqa: ANN001
        model = draft if settings.get("with_draft", True) else None
        keywords = {k: v for k, v in settings.items() if k != "with_draft"}
        out = generate(
            target,
            model,
            ids,
            attention_mask=mask,
            max_new_tokens=max_new,
            eos_token_id=eos or None,
            pad_token_id=pad,
            do_sample=False,
            **keywords,
        )
        return out.sequences[:, ids.shape[1] :]

    return run


BATCH_METHODS: dict[str, Decode] = {
    "hf-target": _hf,  # transformers' batched generate, the target alone
    "target": _dynaspec(with_draft=False),  # dynaspec's batched target alone
    "adaptive": _dynaspec(),  # the draft model, adaptive
    "hybrid": _dynaspec(prompt_lookup_num_tokens=32),  # draft model + prompt lookup 32
    "prompt-lookup": _dynaspec(with_draft=False, prompt_lookup_num_tokens=32),
    # The fast path (eval/bench/fast.py's adapters and methods: static KV cache, weights
    # prepacked in the model's dtype; the w8a8/w4a8 targets on the integer verification
    # kernels, AVX512-VNNI), run by the same methods over a static batch cache; the draft is
    # the method's own (None for a target alone):
    **{
        name: _dynaspec(prompt_lookup_num_tokens=32) if FAST_METHODS[name].lookup else _dynaspec()
        for name in (
            "static-target",
            "static-adaptive",
            "static-hybrid",
            *(f"{v}-{k}" for v in ("w8a8", "w4a8") for k in ("target", "adaptive", "hybrid")),
            # the draft in 4 bits (every layer, int8 activations: AVX512-VNNI), lookup 32
            "fast-hybrid-w4a8",
            "w8a8-hybrid-w4a8",
            "w4a8-hybrid-w4a8",
        )
    },
}

# Methods decoded by eval/bench/fast.py's static adapters (the others: the models as loaded).
_FAST = {name for name in BATCH_METHODS if name in FAST_METHODS}
# A method's ratio and rows are to its target alone: a fast method's reference (the static
# target's, its backend's), the others' dynaspec's eager batched target alone.
_BASE = {name: FAST_METHODS[name].reference for name in _FAST if FAST_METHODS[name].reference}
# Methods whose target computes outputs of its own (int8 activations): not the bf16 target's.
_OWN_OUTPUT = {name for name in _FAST if FAST_METHODS[name].target != "bf16"}
# Methods with a model on the int8 x int8 kernels (w8a8/w4a8 target or draft): AVX512-VNNI.
_VNNI = {
    name
    for name in _FAST
    if {FAST_METHODS[name].target, FAST_METHODS[name].draft} & {"w8a8", "w4a8"}
}
# `--batch` without --methods: every method but those.
DEFAULT_BATCH_METHODS = tuple(m for m in BATCH_METHODS if m not in _VNNI)


@dataclass(frozen=True)
class BatchRecord:
    """One method on one batch."""

    batch_size: int  # the size asked for (this batch may be the smaller last one)
    method: str
    rows: int
    new_tokens: int  # every row's, each up to and including its EOS
    wall_s: float
    tokens_per_s: float
    reference: str | None  # the method whose rows this one's were compared with
    same_as_reference: bool | None  # every row equal to the reference's (None: no reference)
    run: dict[str, Any]  # machine, versions, git, command (as the per-prompt records)


def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); ConfigError in --batch words otherwise."""
    return counts(text, "--batch")


def parse_batch_methods(text: str) -> tuple[str, ...]:
    methods = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [m for m in methods if m not in BATCH_METHODS]
    if unknown or not methods:
        raise ConfigError(
            f"--methods with --batch: unknown {', '.join(unknown) or '(none)'}; choose from "
            f"{', '.join(BATCH_METHODS)}"
        )
    return methods


def new_token_count(new: torch.Tensor, eos: Sequence[int]) -> int:
    """Tokens of (B, N) new ids up to and including each row's first EOS."""
    total = 0
    for row in new.tolist():
        ends = [i for i, token in enumerate(row) if token in eos]
        total += ends[0] + 1 if ends else len(row)
    return total


def run_batch_bench(
    target: Any,
    draft: Any,
    prompts: Sequence[torch.Tensor],
    sizes: Sequence[int],
    methods: Sequence[str],
    setup: dict[str, Any],
    out_dir: Path,
) -> list[BatchRecord]:
    """Every method on the same batches of `prompts` ((1, T_i) ids) at every size; writes
    batch.jsonl and batch.md to `out_dir`. `setup`: max_new_tokens, eos, pad, run, warmup."""
    records: list[BatchRecord] = []
    if setup["warmup"]:  # untimed: every code path once, on the first two prompts
        ids, mask = left_padded(list(prompts[:2]), setup["pad"])
        for method in methods:
            _decode(method, target, draft, ids[:, -8:], mask[:, -8:], 4, setup)
    with open(out_dir / "batch.jsonl", "w", encoding="utf-8") as out:
        for size in sizes:
            for start in range(0, len(prompts), size):
                ids, mask = left_padded(list(prompts[start : start + size]), setup["pad"])
                outputs: dict[str, torch.Tensor] = {}
                for method in methods:
                    record, new = _measure(method, size, target, draft, ids, mask, setup, outputs)
                    outputs[method] = new
                    records.append(record)
                    out.write(json.dumps(asdict(record)) + "\n")
                    out.flush()
                    _progress(record, start, len(prompts))
    (out_dir / "batch.md").write_text(batch_table(records, methods, sizes) + "\n")
    return records


def _progress(record: BatchRecord, start: int, total: int) -> None:
    """One line on stderr per method and batch (a run takes minutes to hours)."""
    same = {None: "", True: ", rows equal {}'s", False: ", rows DIFFER from {}'s"}
    print(
        f"[batch {record.batch_size}, prompts {start + 1}-{start + record.rows} of {total}] "
        f"{record.method}: {record.new_tokens} tokens in {record.wall_s:.1f} s "
        f"({record.tokens_per_s:.2f} tok/s)"
        + same[record.same_as_reference].format(record.reference),
        file=sys.stderr,
        flush=True,
    )


def _decode(method, target, draft, ids, mask, max_new, setup) -> torch.Tensor:  # noqa: ANN001
    if method in _FAST:  # the fast adapters of the same models
        target, draft = setup["fast"].pair(method)
    with torch.inference_mode():
        return BATCH_METHODS[method](
            target, draft, ids, mask, max_new, list(setup["eos"]), setup["pad"]
        )


def _measure(method, size, target, draft, ids, mask, setup, outputs):  # noqa: ANN001, ANN202
    """(record, new ids) of one method on one batch; its rows are compared with
    transformers' batched output (hf-target) where that ran before, else with its own
    target alone's (static-target for the fast methods, target for the others)."""
    start = perf_counter()
    new = _decode(method, target, draft, ids, mask, setup["max_new_tokens"], setup)
    wall = perf_counter() - start
    count = new_token_count(new, setup["eos"])
    candidates = ("hf-target", _BASE.get(method, "target"))
    if method in _OWN_OUTPUT:  # a model of its own: only its own target alone compares
        candidates = (_BASE[method],) if method in _BASE else ()
    reference = next((name for name in candidates if name in outputs), None)
    same = None
    if reference is not None:
        width = min(new.shape[1], outputs[reference].shape[1])
        same = bool(torch.equal(new[:, :width], outputs[reference][:, :width]))
    record = BatchRecord(
        size, method, int(ids.shape[0]), count, round(wall, 4), count / wall, reference,
        same, setup["run"],
    )  # fmt: skip
    return record, new


def batch_table(
    records: Sequence[BatchRecord], methods: Sequence[str], sizes: Sequence[int]
) -> str:
    """Throughput (new tokens / wall, over all batches of a size) per method and size, with
    the ratio to dynaspec's batched target alone at that size (the fast methods: to
    static-target)."""
    totals: dict[tuple[str, int], list[float]] = {}
    for record in records:
        pair = totals.setdefault((record.method, record.batch_size), [0.0, 0.0])
        pair[0] += record.new_tokens
        pair[1] += record.wall_s
    rows = []
    for method in methods:
        cells = [method]
        for size in sizes:
            tokens, wall = totals.get((method, size), (0.0, 0.0))
            base = totals.get((_BASE.get(method, "target"), size))
            rate = tokens / wall if wall else 0.0
            ratio = f" ({rate / (base[0] / base[1]):.2f}x)" if base and base[1] else ""
            cells.append(f"{rate:.1f}{ratio}")
        compared = [r for r in records if r.method == method and r.reference is not None]
        cells.append(str(sum(not r.same_as_reference for r in compared)) if compared else "")
        rows.append(cells)
    header = ["method", *[f"batch {size} tok/s (vs its target)" for size in sizes], "differ"]
    # differ: batches whose rows differ from hf-target's where it ran, else from the
    # method's own target alone (empty: nothing to compare with)
    return "\n".join(markdown_table(header, rows))
