"""Report of a `dynaspec bench` run: a markdown table and PNG plots from results.jsonl.

Definitions (each a median over prompts of a per-prompt ratio, never a ratio of means, so
one slow outlier cannot move a column):

- speedup of method M on a task = median over the task's prompts of
  wall(target alone) / wall(M), both measured on the same prompt in the same run;
- "dyn / HF dyn" = median over prompts of wall(dynaspec dynamic) / wall(transformers
  dynamic): below 1.0 dynaspec is faster;
- "acc/round (dyn)" = tokens accepted per round of dynaspec's dynamic schedule, pooled over
  the task's prompts: sum of accepted drafted tokens / sum of rounds (each round also adds
  the target's own token);
- "mismatches" = (prompt, method) records whose output differs from the target alone,
  with how many of them are numerical ties and how many are bugs.

Runnable alone to re-render a run: ``python -m dynaspec.eval.bench.report results.jsonl [--out
DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

BASELINE = "target"
ALL_TASKS_ROW = "all"
# (method, column header) of the speedup columns, in table order
SPEEDUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("heuristic", "heuristic"),
    ("dynamic", "dynamic"),
    ("constant", "constant"),
    ("adaptive", "adaptive"),
    ("adaptive-warm", "adaptive-warm"),
    ("oracle", "oracle"),
    ("hf-heuristic", "HF heuristic"),
    ("hf-dynamic", "HF dynamic"),
)
ACCEPTED_HEADER = "acc/round (dyn)"
RELATIVE_HEADER = "dyn / HF dyn"
MISMATCH_HEADER = "mismatches"
TABLE_HEADERS: tuple[str, ...] = (
    "target",
    "draft",
    "task",
    "prompts",
    *(header for _, header in SPEEDUP_COLUMNS),
    ACCEPTED_HEADER,
    RELATIVE_HEADER,
    MISMATCH_HEADER,
)
METHOD_ORDER = (
    "target",
    "constant",
    "heuristic",
    "dynamic",
    "adaptive",
    "adaptive-warm",
    "oracle",
    "hf-target",
    "hf-heuristic",
    "hf-dynamic",
)
SPEEDUP_PLOT = "speedup.png"
ACCEPTED_PLOT = "accepted_per_round.png"


def load_records(jsonl_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a results.jsonl (blank lines skipped)."""
    with open(jsonl_path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


def per_prompt_ratios(
    records: Iterable[Mapping[str, Any]],
    numerator: str,
    denominator: str,
    value: str = "wall_time_s",
) -> dict[str, list[float]]:
    """task -> [record(numerator)[value] / record(denominator)[value] per prompt].

    Records are paired by (task, prompt_id); prompts lacking either method, or with a zero
    or missing value, are left out.
    """
    by_prompt: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    for record in records:
        amount = record.get(value)
        if isinstance(amount, (int, float)) and amount > 0:
            by_prompt[(record["task"], str(record["prompt_id"]))][record["method"]] = amount
    ratios: dict[str, list[float]] = defaultdict(list)
    for (task, _), values in by_prompt.items():
        if numerator in values and denominator in values:
            ratios[task].append(values[numerator] / values[denominator])
    return dict(ratios)


def median_of_ratios(
    records: Iterable[Mapping[str, Any]],
    numerator: str,
    denominator: str,
    value: str = "wall_time_s",
    *,
    all_tasks: bool = True,
) -> dict[str, float]:
    """task -> median over prompts of the per-prompt ratio (see per_prompt_ratios).

    With `all_tasks`, the key "all" holds the median over every prompt of every task.
    Speedup over the target alone: median_of_ratios(records, "target", method).
    """
    ratios = per_prompt_ratios(records, numerator, denominator, value)
    medians = {task: statistics.median(values) for task, values in ratios.items() if values}
    pooled = [ratio for values in ratios.values() for ratio in values]
    if all_tasks and pooled:
        medians[ALL_TASKS_ROW] = statistics.median(pooled)
    return medians


def pooled_accepted_per_round(
    records: Iterable[Mapping[str, Any]], method: str
) -> dict[str, float]:
    """task (and "all") -> sum of accepted drafted tokens / sum of rounds of `method`."""
    accepted: Counter[str] = Counter()
    rounds: Counter[str] = Counter()
    for record in records:
        per_round = record.get("accepted_per_round") or []
        if record["method"] != method or not per_round:
            continue
        for task in (record["task"], ALL_TASKS_ROW):
            accepted[task] += sum(per_round)
            rounds[task] += len(per_round)
    return {task: accepted[task] / rounds[task] for task in rounds if rounds[task]}


def mismatch_counts(records: Iterable[Mapping[str, Any]]) -> dict[str, Counter[str]]:
    """task (and "all") -> Counter of mismatch kinds ("tie", "BUG") over every method."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        for task in (record["task"], ALL_TASKS_ROW):
            counts[task]["records"] += 1
            if not record.get("matches_target", True):
                kind = (record.get("mismatch") or {}).get("kind") or "BUG"
                counts[task][kind] += 1
    return dict(counts)


def format_mismatches(counts: Counter[str] | None) -> str:
    if not counts:
        return "0"
    total = counts.get("tie", 0) + counts.get("BUG", 0)
    if not total:
        return "0"
    return f"{total} ({counts.get('tie', 0)} tie, {counts.get('BUG', 0)} BUG)"


def _times(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}x"


def _number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _tasks(records: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(record["task"] for record in records))


def _methods(records: Sequence[Mapping[str, Any]]) -> list[str]:
    present = set(record["method"] for record in records)
    ordered = [name for name in METHOD_ORDER if name in present]
    return ordered + sorted(present - set(ordered))


def speedup_table(records: Sequence[Mapping[str, Any]]) -> str:
    """The main table: one row per task (and "all" when there are several)."""
    run = records[0].get("run", {}) if records else {}
    target_name, draft_name = run.get("target", "?"), run.get("draft", "?")
    tasks = _tasks(records)
    rows = tasks + ([ALL_TASKS_ROW] if len(tasks) > 1 else [])
    speedups = {
        method: median_of_ratios(records, BASELINE, method) for method, _ in SPEEDUP_COLUMNS
    }
    accepted = pooled_accepted_per_round(records, "dynamic")
    relative = median_of_ratios(records, "dynamic", "hf-dynamic")
    mismatches = mismatch_counts(records)
    prompts: dict[str, set[str]] = defaultdict(set)
    for record in records:
        prompts[record["task"]].add(str(record["prompt_id"]))
        prompts[ALL_TASKS_ROW].add(f"{record['task']}\0{record['prompt_id']}")
    lines = [
        "| " + " | ".join(TABLE_HEADERS) + " |",
        "|" + "---|" * 4 + "---:|" * (len(TABLE_HEADERS) - 4),
    ]
    for task in rows:
        cells = [target_name, draft_name, task, str(len(prompts[task]))]
        cells += [_times(speedups[method].get(task)) for method, _ in SPEEDUP_COLUMNS]
        cells += [
            _number(accepted.get(task)),
            _number(relative.get(task)),
            format_mismatches(mismatches.get(task)),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def method_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Per method over all prompts: speedup, tok/s, acceptance, forwards, mismatches."""
    headers = (
        "method", "speedup (median)", "tok/s (median)", "acc/round", "acceptance",
        "draft fwd/prompt", "target fwd/prompt", "mismatches",
    )  # fmt: skip
    lines = ["| " + " | ".join(headers) + " |", "|---|" + "---:|" * (len(headers) - 1)]
    for method in _methods(records):
        rows = [r for r in records if r["method"] == method]
        speedup = median_of_ratios(records, BASELINE, method).get(ALL_TASKS_ROW)
        rates = [r["tokens_per_s"] for r in rows if r.get("tokens_per_s")]
        accepted = pooled_accepted_per_round(records, method).get(ALL_TASKS_ROW)
        drafted = sum(sum(r.get("drafted_per_round") or []) for r in rows)
        kept = sum(sum(r.get("accepted_per_round") or []) for r in rows)
        counts = mismatch_counts(rows).get(ALL_TASKS_ROW)
        cells = [
            method,
            _times(speedup),
            _number(statistics.median(rates) if rates else None, 1),
            _number(accepted),
            f"{kept / drafted:.0%}" if drafted else "–",
            _number(statistics.mean(r["draft_forwards"] for r in rows), 1),
            _number(statistics.mean(r["target_forwards"] for r in rows), 1),
            format_mismatches(counts),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _header(records: Sequence[Mapping[str, Any]]) -> list[str]:
    run = records[0].get("run", {}) if records else {}
    config = run.get("config", {})
    versions = run.get("versions", {})
    machine = run.get("machine", {})
    git = run.get("git", {})
    sha = (git.get("sha") or "unknown")[:12] + (" (dirty)" if git.get("dirty") else "")
    lines = [
        f"# dynaspec bench: {run.get('pair', '?')}",
        "",
        f"- target `{run.get('target', '?')}`, draft `{run.get('draft', '?')}`, "
        f"dtype {config.get('dtype', '?')}, greedy, {config.get('max_new_tokens', '?')} new "
        f"tokens, {config.get('num_prompts', '?')} prompts",
        f"- {machine.get('cpu_model') or machine.get('platform', '?')}, "
        f"{machine.get('usable_cpus', '?')} usable CPUs, {machine.get('torch_threads', '?')} "
        f"torch threads",
        f"- torch {versions.get('torch')}, transformers {versions.get('transformers')}, "
        f"dynaspec {versions.get('dynaspec')} at {sha}; scikit-learn "
        + (
            "installed (transformers' dynamic tunes its threshold online)"
            if run.get("sklearn_available")
            else "not installed (transformers' dynamic keeps its threshold at 0.4)"
        ),
        f"- started {run.get('started_at', '?')}",
        f"- command: `{run.get('command', '?')}`",
    ]
    return lines


def render_markdown(records: Sequence[Mapping[str, Any]], plots: Sequence[str] = ()) -> str:
    """The whole table.md text."""
    if not records:
        return "# dynaspec bench\n\nno records\n"
    lines = _header(records)
    lines += [
        "",
        "Speedup over the target alone (median over prompts of per-prompt wall-time ratios):",
        "",
        speedup_table(records),
        "",
        f"`{ACCEPTED_HEADER}`: drafted tokens accepted per round by dynaspec's dynamic "
        f"schedule (pooled). `{RELATIVE_HEADER}`: median per-prompt wall time of dynaspec "
        "dynamic / transformers dynamic (< 1: dynaspec faster). `mismatches`: outputs that "
        "differ from the target alone, over every method (tie: the target's top logits "
        "within a few dtype steps; BUG: anything else).",
        "",
        "Per method, all prompts:",
        "",
        method_table(records),
    ]
    bad = [r for r in records if not r.get("matches_target", True)]
    if bad:
        lines += ["", "Mismatches:", ""]
        for record in bad:
            info = record.get("mismatch") or {}
            steps = info.get("steps")
            lines.append(
                f"- **{info.get('kind', 'BUG')}** {record['method']} on "
                f"{record['task']}/{record['prompt_id']}: new token {info.get('position')}, "
                f"target {info.get('target_token')} vs {info.get('method_token')}"
                + (f", {steps:.1f} {info.get('dtype')} steps from the top logit" if steps else "")
            )
    if plots:
        lines += [""] + [f"![{Path(plot).stem}]({Path(plot).name})" for plot in plots]
    return "\n".join(lines) + "\n"


def plot_speedups(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Grouped bars: speedup over the target alone per task (x) and method (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = _tasks(records)
    rows = tasks + ([ALL_TASKS_ROW] if len(tasks) > 1 else [])
    methods = [m for m in _methods(records) if m != BASELINE]
    speedups = {method: median_of_ratios(records, BASELINE, method) for method in methods}
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(rows) + 0.5 * len(methods)), 4.5))
    for index, method in enumerate(methods):
        xs = [row + (index - (len(methods) - 1) / 2) * width for row in range(len(rows))]
        ys = [speedups[method].get(task, 0.0) for task in rows]
        ax.bar(xs, ys, width, label=method)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(rows)), rows)
    ax.set_ylabel("speedup over target alone (median)")
    run = records[0].get("run", {})
    ax.set_title(f"{run.get('pair', '')}: speedup per task and method")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_accepted(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Histograms (one panel per speculative method) of drafted tokens accepted per round.

    Only rounds that drafted something count; the share of rounds that drafted nothing
    (the adaptive policy's plain target steps) is given in the panel title.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[int]] = {}
    undrafted: dict[str, float] = {}
    for method in _methods(records):
        pairs = [
            (drafted, accepted)
            for record in records
            if record["method"] == method
            for drafted, accepted in zip(
                record.get("drafted_per_round") or [],
                record.get("accepted_per_round") or [],
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


def render_report(jsonl_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> str:
    """Writes table.md, speedup.png and accepted_per_round.png into `out_dir`; returns the
    markdown. Plots are skipped with a note on stderr when matplotlib is not installed
    (``pip install dynaspec[bench]``)."""
    records = load_records(jsonl_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    if records:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "dynaspec bench: matplotlib is not installed, no plots "
                "(pip install 'dynaspec[bench]')",
                file=sys.stderr,
            )
        else:
            plot_speedups(records, out / SPEEDUP_PLOT)
            plot_accepted(records, out / ACCEPTED_PLOT)
            plots = [SPEEDUP_PLOT, ACCEPTED_PLOT]
    markdown = render_markdown(records, plots)
    (out / "table.md").write_text(markdown, encoding="utf-8")
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dynaspec.eval.bench.report",
        description="Re-render table.md and the plots of a dynaspec bench results.jsonl.",
    )
    parser.add_argument("jsonl", help="results.jsonl of a run")
    parser.add_argument("--out", help="output folder (default: the JSONL's folder)")
    args = parser.parse_args(argv)
    out = args.out or str(Path(args.jsonl).parent)
    print(render_report(args.jsonl, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
