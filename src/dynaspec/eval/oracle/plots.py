"""The PNG plots of `dynaspec oracle`, one function per plot, from the JSON summary
(dynaspec.eval.oracle.summary). matplotlib is optional: require_plotting() says how to
install it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynaspec.errors import MissingDependencyError

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:gray")


def require_plotting() -> None:
    """Raises MissingDependencyError (with the fix) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "the oracle report draws its plots with matplotlib, which is not installed: "
            "run `pip install 'dynaspec[bench]'` (or `pip install matplotlib`)"
        ) from None


def write_plots(summary: dict[str, Any], out: Path) -> list[Path]:
    """Draws the PNG plots into `out`; returns their paths."""
    require_plotting()
    groups = summary["groups"]
    tasks = summary["tasks"] or list(groups)
    paths = []
    for plot in (
        _lookahead_histogram,
        _per_prompt_means,
        _forward_counts,
        _calibration,
        _timeline,
        _predicted_speedup,
    ):
        drawn = plot(summary, tasks)
        if drawn is not None:
            fig, name = drawn
            path = out / name
            fig.savefig(path, dpi=100)
            paths.append(path)
    return paths


def _constant_methods(summary: dict[str, Any]) -> list[tuple[int, str]]:
    """(k, method name) of the constant-k methods."""
    return [(int(m.split("-")[1]), m) for m in summary["methods"] if m.startswith("constant-")]


def _dynamic_methods(summary: dict[str, Any]) -> list[tuple[float, str]]:
    """(threshold, method name) of the dynamic-t methods."""
    return [(float(m.split("-", 1)[1]), m) for m in summary["methods"] if m.startswith("dynamic-")]


Drawn = tuple[Any, str] | None  # (matplotlib Figure, file name), or None: nothing to draw


def _lookahead_histogram(summary: dict[str, Any], tasks: list[str]) -> Drawn:
    """Histogram of the oracle lookahead per task."""
    from matplotlib.figure import Figure

    groups = summary["groups"]
    fig = Figure(figsize=(4 * len(tasks), 3.2), layout="constrained")
    axes = fig.subplots(1, len(tasks), squeeze=False)[0]
    for ax, task in zip(axes, tasks, strict=True):
        histogram = {int(k): v for k, v in groups[task]["lookahead_histogram"].items()}
        total = sum(histogram.values()) or 1
        clip = 20
        xs = list(range(1, clip + 1))
        ys = [histogram.get(x, 0) / total for x in xs[:-1]]
        ys.append(sum(v for k, v in histogram.items() if k >= clip) / total)
        ax.bar(xs, ys, color="tab:blue")
        mean = groups[task]["oracle_lookahead"].get("mean")
        if mean is not None:
            ax.axvline(mean, color="tab:red", linestyle="--", label=f"mean {mean:.2f}")
            ax.legend()
        ax.set_title(f"{task} ({sum(histogram.values())} rounds)")
        ax.set_xlabel(f"oracle lookahead L = agreeing run + 1 ({clip} = {clip}+)")
        ax.set_ylabel("share of rounds")
    return fig, "oracle_lookahead_hist.png"


def _per_prompt_means(summary: dict[str, Any], tasks: list[str]) -> Drawn:
    """Per-prompt mean oracle lookahead, sorted, per task."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    groups = summary["groups"]
    fig = Figure(figsize=(4 * len(tasks), 3.2), layout="constrained")
    axes = fig.subplots(1, len(tasks), squeeze=False, sharey=True)[0]
    for ax, task in zip(axes, tasks, strict=True):
        means = sorted(
            p["mean_oracle_lookahead"]
            for p in groups[task]["per_prompt"]
            if p["mean_oracle_lookahead"] is not None
        )
        ax.bar(range(1, len(means) + 1), means, color="tab:green")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(task)
        ax.set_xlabel("prompt (sorted)")
        ax.set_ylabel("mean oracle lookahead")
    return fig, "per_prompt_mean_lookahead.png"


def _forward_counts(summary: dict[str, Any], tasks: list[str]) -> Drawn:
    """Forward counts vs static lookahead and vs dynamic threshold, the oracle's marked."""
    from matplotlib.figure import Figure

    groups = summary["groups"]
    static, dynamic = _constant_methods(summary), _dynamic_methods(summary)
    fig = Figure(figsize=(10, 6.4), layout="constrained")
    axes = fig.subplots(2, 2)
    for row, kind in enumerate(("target", "draft")):
        for task, color in zip(tasks, COLORS * 4, strict=False):
            counts = groups[task]["forward_counts"]
            for ax, methods, marker in ((axes[row][0], static, "o"), (axes[row][1], dynamic, "s")):
                if methods:
                    ax.plot(
                        [x for x, _ in methods],
                        [counts[m][kind] for _, m in methods],
                        marker=marker,
                        color=color,
                        label=task,
                    )
                    ax.axhline(counts["oracle"][kind], color=color, linestyle="--")
        axes[row][0].set_xlabel("static lookahead k")
        axes[row][1].set_xlabel("dynamic confidence threshold (max 20 tokens)")
        for ax in axes[row]:
            ax.set_ylabel(f"{kind} forward passes")
            ax.legend(title="dashed: oracle", fontsize=8)
    return fig, "forward_counts.png"


def _calibration(summary: dict[str, Any], tasks: list[str]) -> Drawn:
    """Calibration curve of the draft (teacher-forced), with the positions per bin."""
    from matplotlib.figure import Figure

    groups = summary["groups"]
    fig = Figure(figsize=(5.5, 6), layout="constrained")
    ax, ax_count = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    ax.plot([0, 1], [0, 1], color="black", linestyle=":", label="calibrated")
    for task, color in zip(tasks, COLORS * 4, strict=False):
        bins = [b for b in groups[task]["calibration"] if b["count"]]
        ax.plot(
            [b["mean_confidence"] for b in bins],
            [b["rate"] for b in bins],
            marker="o",
            color=color,
            label=task,
        )
        ax_count.plot(
            [(b["low"] + b["high"]) / 2 for b in groups[task]["calibration"]],
            [b["count"] for b in groups[task]["calibration"]],
            marker=".",
            color=color,
        )
    ax.set_ylabel("draft token = target token")
    ax.set_title("draft calibration (teacher-forced)")
    ax.legend(fontsize=8)
    ax_count.set_xlabel("draft confidence")
    ax_count.set_ylabel("positions")
    ax_count.set_yscale("log")
    return fig, "calibration.png"


def _timeline(summary: dict[str, Any], tasks: list[str]) -> Drawn:
    """Lookahead per round of one prompt, for a few methods."""
    from matplotlib.figure import Figure

    timeline = summary.get("timeline")
    if timeline and timeline["series"]:
        fig = Figure(figsize=(10, 3.6), layout="constrained")
        ax = fig.subplots()
        styles = {
            "oracle": ("black", "-"),
            "dynamic-0.4": ("tab:orange", "-"),
            "constant-5": ("tab:blue", "--"),
        }
        for method, points in timeline["series"].items():
            color, style = styles.get(method, ("tab:gray", "-"))
            ax.step(
                [p[0] for p in points],
                [p[1] for p in points],
                where="post",
                color=color,
                linestyle=style,
                label=f"{method} ({len(points)} rounds)",
            )
        ax.set_xlabel("new tokens committed before the round")
        ax.set_ylabel("tokens drafted in the round")
        ax.set_title(f"{timeline['task']} {timeline['id']}: lookahead per round")
        ax.legend(fontsize=8)
        return fig, "timeline.png"
    return None


def _predicted_speedup(summary: dict[str, Any], tasks: list[str]) -> Drawn:
    """The cost model's predicted speedup vs static lookahead, the oracle's dashed."""
    from matplotlib.figure import Figure

    groups = summary["groups"]
    static = _constant_methods(summary)
    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.subplots()
    for task, color in zip(tasks, COLORS * 4, strict=False):
        predicted = groups[task]["predicted_speedup"]
        if static:
            ax.plot(
                [k for k, _ in static],
                [predicted[m] for _, m in static],
                marker="o",
                color=color,
                label=task,
            )
        ax.axhline(predicted["oracle"], color=color, linestyle="--")
    ax.axhline(1.0, color="black", linestyle=":")
    ax.set_xlabel("static lookahead k")
    ax.set_ylabel("predicted speedup")
    ax.set_title("cost model (dashed: oracle)")
    ax.legend(fontsize=8)
    return fig, "predicted_speedup.png"
