"""The fast-methods table of a `dynaspec bench` report (see dynaspec.eval.bench.fast)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from dynaspec.eval.bench.aggregate import ALL_TASKS_ROW, median_of_ratios


def fast_section(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Markdown lines for the fast and llama.cpp methods of a run (none if it had none):
    speedup over transformers' own generate (hf-target) and over the dynaspec target alone,
    median tok/s, compile time and bytes of weights."""
    names = list(dict.fromkeys(r["method"] for r in records if r.get("family") in _FAMILIES))
    if not names:
        return []
    lines = [
        "",
        "Fast methods (speedup: median of per-prompt wall-time ratios; weights: bytes of the "
        "weights the method's models hold):",
        "",
        "| method | vs hf-target | vs target | tok/s (median) | compile s | weights GB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in names:
        rows = [r for r in records if r["method"] == name]
        cells = [name]
        for baseline in ("hf-target", "target"):
            ratio = median_of_ratios(records, baseline, name).get(ALL_TASKS_ROW)
            cells.append(f"{ratio:.2f}x" if ratio else "–")
        rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
        cells.append(f"{statistics.median(rates):.1f}" if rates else "–")
        compile_s = max((r.get("compile_time_s") or 0.0) for r in rows)
        weights = max((r.get("weight_bytes") or 0) for r in rows)
        cells.append(f"{compile_s:.0f}" if compile_s else "–")
        cells.append(f"{weights / 1e9:.2f}" if weights else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


_FAMILIES = ("fast", "llamacpp")  # record families shown by fast_section
