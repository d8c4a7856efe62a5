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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynaspec.eval.bench.aggregate import (
    ALL_TASKS_ROW,
    median_of_ratios,
    methods_of,
    mismatch_counts,
    pooled_accepted_per_round,
    tasks_of,
)
from dynaspec.eval.bench.fast_report import fast_section
from dynaspec.eval.bench.methods import BASELINE
from dynaspec.eval.bench.plots import ACCEPTED_PLOT, SPEEDUP_PLOT, plot_accepted, plot_speedups

# (method, column header) of the speedup columns, in table order
SPEEDUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("heuristic", "heuristic"),
    ("dynamic", "dynamic"),
    ("constant", "constant"),
    ("adaptive", "adaptive"),
    ("adaptive-warm", "adaptive-warm"),
    ("oracle", "oracle"),
    ("prompt-lookup", "prompt lookup"),
    ("hybrid", "hybrid"),
    ("hf-heuristic", "HF heuristic"),
    ("hf-dynamic", "HF dynamic"),
    ("hf-prompt-lookup", "HF prompt lookup"),
    ("hf-prompt-lookup-32", "HF prompt lookup 32"),
)
ACCEPTED_HEADER = "acc/round (dyn)"
RELATIVE_HEADER = "dyn / HF dyn"
HYBRID_HEADER = "hybrid vs HF PL"
MISMATCH_HEADER = "mismatches"
TABLE_HEADERS: tuple[str, ...] = (
    "target",
    "draft",
    "task",
    "prompts",
    *(header for _, header in SPEEDUP_COLUMNS),
    ACCEPTED_HEADER,
    RELATIVE_HEADER,
    HYBRID_HEADER,
    MISMATCH_HEADER,
)


def load_records(jsonl_path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The records of a results.jsonl (blank lines skipped)."""
    with open(jsonl_path, encoding="utf-8") as file:
        return [json.loads(line) for line in file if line.strip()]


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


def speedup_table(records: Sequence[Mapping[str, Any]]) -> str:
    """The main table: one row per task (and "all" when there are several)."""
    run = records[0].get("run", {}) if records else {}
    target_name, draft_name = run.get("target", "?"), run.get("draft", "?")
    tasks = tasks_of(records)
    rows = tasks + ([ALL_TASKS_ROW] if len(tasks) > 1 else [])
    speedups = {
        method: median_of_ratios(records, BASELINE, method) for method, _ in SPEEDUP_COLUMNS
    }
    accepted = pooled_accepted_per_round(records, "dynamic")
    relative = median_of_ratios(records, "dynamic", "hf-dynamic")
    hybrid = median_of_ratios(records, "hf-prompt-lookup", "hybrid")
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
            _times(hybrid.get(task)),
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
    for method in methods_of(records):
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
        f"dynamic / transformers dynamic (< 1: dynaspec faster). `{HYBRID_HEADER}`: median "
        "per-prompt wall time of transformers' prompt lookup (10 tokens) / dynaspec's hybrid "
        "(> 1: the hybrid faster). `mismatches`: outputs that "
        "differ from the target alone, over every method (tie: the target's top logits "
        "within a few dtype steps; BUG: anything else).",
        "",
        "Per method, all prompts:",
        "",
        method_table(records),
        *fast_section(records),
    ]
    bad = [r for r in records if r.get("matches_target", True) is False]
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
