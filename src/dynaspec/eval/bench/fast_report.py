"""The fast-methods table of a `dynaspec bench` report (see dynaspec.eval.bench.fast)."""

from __future__ import annotations

from collections.abc import Sequence

from dynaspec.eval.bench.aggregate import ALL_TASKS_ROW, median, speedups
from dynaspec.eval.bench.record import BenchRecord
from dynaspec.eval.bench.tables import markdown_table

_FAMILIES = ("fast", "llamacpp", "openvino")  # record families shown by fast_section
_HEADERS = ("method", "vs hf-target", "vs target", "tok/s (median)", "compile s", "weights GB")


def fast_section(records: Sequence[BenchRecord]) -> list[str]:
    """Markdown lines for the fast, llama.cpp and OpenVINO methods of a run (none if none):
    speedup over transformers' own generate (hf-target) and over the dynaspec target alone,
    median tok/s, compile time and bytes of weights."""
    names = list(dict.fromkeys(r.method for r in records if r.measurement.family in _FAMILIES))
    if not names:
        return []
    rows = []
    for name in names:
        measured = [r.measurement for r in records if r.method == name]
        cells = [name]
        for baseline in ("hf-target", "target"):
            ratio = speedups(records, name, baseline).get(ALL_TASKS_ROW)
            cells.append(f"{ratio:.2f}x" if ratio else "–")
        rate = median(m.tokens_per_s for m in measured if m.tokens_per_s)
        compile_s = max((m.compile_time_s or 0.0) for m in measured)
        weights = max((m.weight_bytes or 0) for m in measured)
        cells.append(f"{rate:.1f}" if rate is not None else "–")
        cells.append(f"{compile_s:.0f}" if compile_s else "–")
        cells.append(f"{weights / 1e9:.2f}" if weights else "–")
        rows.append(cells)
    return [
        "",
        "Fast methods (speedup: median of per-prompt ratios of tokens per second; weights: "
        "bytes of the weights the method's models hold):",
        "",
        *markdown_table(_HEADERS, rows),
    ]
