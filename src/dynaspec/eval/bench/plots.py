"""Plots of a `dynaspec bench` run: speedup per task and method, accepted tokens per round."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dynaspec.eval.bench.aggregate import (
    ALL_TASKS_ROW,
    methods_of,
    speedups,
    tasks_of,
)
from dynaspec.eval.bench.methods import BASELINE
from dynaspec.eval.bench.record import BenchRecord

SPEEDUP_PLOT = "speedup.png"
ACCEPTED_PLOT = "accepted_per_round.png"


def plot_speedups(records: Sequence[BenchRecord], path: Path) -> None:
    """Grouped bars: speedup over the target alone per task (x) and method (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = tasks_of(records)
    rows = tasks + ([ALL_TASKS_ROW] if len(tasks) > 1 else [])
    methods = [m for m in methods_of(records) if m != BASELINE]
    ratios = {method: speedups(records, method) for method in methods}
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 0.5 * len(methods)), 4.5))
    for index, method in enumerate(methods):
        xs = [row + (index - (len(methods) - 1) / 2) * width for row in range(len(rows))]
        ys = [ratios[method].get(task, 0.0) for task in rows]
        ax.bar(xs, ys, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(rows)), rows)
    ax.set_ylabel("speedup over target alone (median)")
    run = records[0].run
    ax.set_title(f"{run.get('pair', '')}: speedup per task and method")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accepted(records: Sequence[BenchRecord], path: Path) -> None:
    """Histograms (one panel per speculative method) of drafted tokens accepted per round.

    Only rounds that drafted something count; the share of rounds that drafted nothing
    (the adaptive policy's plain target steps) is given in the panel title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[int]] = {}
    undrafted: dict[str, float] = {}
    for method in methods_of(records):
        pairs = [
            (drafted, accepted)
            for record in records
            if record.method == method
            for drafted, accepted in zip(
                record.measurement.drafted_per_round,
                record.measurement.accepted_per_round,
                strict=False,
            )
        ]
        values = [accepted for drafted, accepted in pairs if drafted]
        if values:
            series[method] = values
            undrafted[method] = 1 - len(values) / len(pairs)
    if not series:
        series = {"(no speculative rounds)": [0]}
    columns = min(4, len(series))
    rows = -(-len(series) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.2 * columns, 2.6 * rows), squeeze=False, sharex=True
    )
    top = max(max(values) for values in series.values())
    bins = [value - 0.5 for value in range(top + 2)]
    for ax, (method, values) in zip(axes.flat, series.items(), strict=False):
        weights = [1 / len(values)] * len(values)
        ax.hist(values, bins=bins, weights=weights, color="tab:blue")
        title = f"{method}: mean {sum(values) / len(values):.2f}"
        if undrafted.get(method):
            title += f", {undrafted[method]:.0%} rounds undrafted"
        ax.set_title(title, fontsize=8)
        ax.set_xlabel("accepted per round", fontsize=8)
        ax.set_ylabel("fraction of rounds", fontsize=8)
    for ax in list(axes.flat)[len(series) :]:
        ax.set_visible(False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
