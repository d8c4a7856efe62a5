"""What `dynaspec bench` records: the run's configuration, one JSONL record per (prompt,
method) with the run's provenance attached, and the end-of-run summary."""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dynaspec.eval.bench.aggregate import median, mismatch_kind
from dynaspec.eval.bench.args import DEFAULT_MAX_NEW_TOKENS
from dynaspec.eval.bench.methods import DEFAULT_METHODS, WARMUP_TOKENS
from dynaspec.eval.bench.record import BenchRecord
from dynaspec.eval.hf_peer import sklearn_available
from dynaspec.eval.provenance import git_state, library_versions, machine_info
from dynaspec.mismatch import DEFAULT_TIE_STEPS
from dynaspec.models.loading import dtype_choice


@dataclass(frozen=True)
class BenchPrompt:
    """A rendered benchmark prompt."""

    task: str  # task name (a table row)
    id: str  # unique within its task
    input_ids: torch.Tensor  # (1, T) int64


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark run measures."""

    methods: tuple[str, ...] = DEFAULT_METHODS  # in rotation order; "target" runs first
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # fixed for every method and prompt
    warmup: bool = True  # one untimed short generation per method before timing
    tie_steps: float = DEFAULT_TIE_STEPS  # classification bound for a numerical tie
    progress: bool = True  # tqdm progress bar over prompts x methods
    repeat: int = 1  # timed runs of every method per prompt; a record keeps the median one


@dataclass
class BenchResult:
    """What run_benchmark() returns."""

    records: list[BenchRecord] = field(default_factory=list)  # one per (prompt, method)
    methods: tuple[str, ...] = ()  # methods actually run, in rotation order

    @property
    def mismatches(self) -> list[BenchRecord]:
        return [record for record in self.records if record.matches_target is False]


def run_metadata(
    *,
    args: argparse.Namespace | None,
    config: BenchConfig,
    label: str,
    target_name: str,
    draft_name: str,
    target: Any,
    command: str,
    num_prompts: int,
) -> dict[str, Any]:
    """Config, library versions, machine and git state: the "run" field of every record."""
    dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
    arguments = {k: v for k, v in vars(args).items() if not callable(v)} if args else {}
    return {
        "pair": label,
        "target": target_name,
        "draft": draft_name,
        "started_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
        "config": {
            **asdict(config),
            "methods": list(config.methods),
            "dtype": dtype,
            # why that dtype: the machine's rule, --dtype, or the tiny pair's float32
            "dtype_reason": dtype_choice(
                getattr(args, "dtype", None),
                pair="tiny" if label in ("smoke", "tiny") else label,
                device=getattr(args, "device", None),
            ).reason,
            "device": str(next(target.parameters()).device),
            "num_prompts": num_prompts,
            "warmup_tokens": WARMUP_TOKENS,
            "arguments": arguments,
        },
        "versions": library_versions(),
        "sklearn_available": sklearn_available(),
        "machine": machine_info(),
        "git": git_state(),
    }


def summary_text(result: BenchResult, out_dir: Path | None = None) -> str:
    """The end-of-run summary: per method medians and every mismatch."""
    lines = ["", "summary (median over prompts):"]
    for name in result.methods:
        rows = [r for r in result.records if r.method == name]
        if not rows:
            continue
        speedups = [r.speedup_vs_target for r in rows if r.speedup_vs_target]
        rates = [r.measurement.tokens_per_s for r in rows if r.measurement.tokens_per_s]
        bad = [r for r in rows if r.matches_target is False]
        lines.append(
            f"  {name:<16} {_median_or_nan(speedups):5.2f}x  {_median_or_nan(rates):7.1f} tok/s"
            f"  mismatches {len(bad)}/{len(rows)}"
        )
    mismatches = result.mismatches
    kinds = Counter(mismatch_kind(r) for r in mismatches)
    peers = f", {kinds['peer']} of other engines" if kinds.get("peer") else ""
    lines.append(
        f"mismatches: {len(mismatches)} ({kinds.get('tie', 0)} tie, {kinds.get('BUG', 0)} BUG"
        f"{peers})"
    )
    for record in mismatches:
        info = record.mismatch
        lines.append(
            f"  !!! {record.method} {record.task}/{record.prompt_id}: "
            f"{mismatch_kind(record)} at new token {info.position if info else None}"
            + (f", {info.steps:.1f} steps" if info and info.steps is not None else "")
        )
    if out_dir is not None:
        lines.append(f"results: {out_dir}/results.jsonl, table: {out_dir}/table.md")
    return "\n".join(lines)


def _median_or_nan(values: Sequence[float]) -> float:
    found = median(values)
    return float("nan") if found is None else found


def output_digest(tokens: Sequence[int]) -> str:
    """Short sha256 of a token list (for comparing outputs across runs)."""
    return hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:16]
