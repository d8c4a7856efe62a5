"""The markdown tables of a `dynaspec bench` report (definitions in
dynaspec.eval.bench.report): the speedup table per task, the table per method, and the
small formatting rules they share with the fast-methods table."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence

from dynaspec.eval.bench.aggregate import (
    ALL_TASKS_ROW,
    mean,
    median,
    median_of_ratios,
    methods_of,
    mismatch_counts,
    pooled_accepted_per_round,
    speedups,
    tasks_of,
)
from dynaspec.eval.bench.methods import SPEEDUP_COLUMNS
from dynaspec.eval.bench.record import BenchRecord

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
METHOD_HEADERS: tuple[str, ...] = (
    "method", "speedup (median)", "tok/s (median)", "acc/round", "acceptance",
    "draft fwd/prompt", "target fwd/prompt", "mismatches",
)  # fmt: skip


def markdown_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1
) -> list[str]:
    """A pipe table, unpadded: the first `left` columns left-aligned, the others right."""
    lines = [
        "| " + " | ".join(headers) + " |",
        "|" + "---|" * left + "---:|" * (len(headers) - left),
    ]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def format_mismatches(counts: Counter[str] | None) -> str:
    if not counts:
        return "0"
    peers = counts.get("peer", 0)
    total = counts.get("tie", 0) + counts.get("BUG", 0) + peers
    if not total:
        return "0"
    other = f", {peers} peer" if peers else ""
    return f"{total} ({counts.get('tie', 0)} tie, {counts.get('BUG', 0)} BUG{other})"


def times(value: float | None) -> str:
    """A speedup: "1.23x", or "–" for None."""
    return "–" if value is None else f"{value:.2f}x"


def number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def speedup_table(records: Sequence[BenchRecord]) -> str:
    """The main table: one row per task (and "all" when there are several)."""
    run = records[0].run if records else {}
    target_name, draft_name = run.get("target", "?"), run.get("draft", "?")
    tasks = tasks_of(records)
    ratios = {method: speedups(records, method) for method, _ in SPEEDUP_COLUMNS}
    accepted = pooled_accepted_per_round(records, "dynamic")
    relative = median_of_ratios(records, "dynamic", "hf-dynamic")
    hybrid = median_of_ratios(records, "hf-prompt-lookup", "hybrid")
    mismatches = mismatch_counts(records)
    prompts: dict[str, set[str]] = defaultdict(set)
    for record in records:
        prompts[record.task].add(str(record.prompt_id))
        prompts[ALL_TASKS_ROW].add(f"{record.task}\0{record.prompt_id}")
    rows = []
    for task in tasks + ([ALL_TASKS_ROW] if len(tasks) > 1 else []):
        cells = [target_name, draft_name, task, str(len(prompts[task]))]
        cells += [times(ratios[method].get(task)) for method, _ in SPEEDUP_COLUMNS]
        cells += [
            number(accepted.get(task)),
            number(relative.get(task)),
            times(hybrid.get(task)),
            format_mismatches(mismatches.get(task)),
        ]
        rows.append(cells)
    return "\n".join(markdown_table(TABLE_HEADERS, rows, left=4))


def method_table(records: Sequence[BenchRecord]) -> str:
    """Per method over all prompts: speedup, tok/s, acceptance, forwards, mismatches."""
    table = []
    for method in methods_of(records):
        rows = [r.measurement for r in records if r.method == method]
        drafted = sum(sum(m.drafted_per_round) for m in rows)
        kept = sum(sum(m.accepted_per_round) for m in rows)
        table.append(
            [
                method,
                times(speedups(records, method).get(ALL_TASKS_ROW)),
                number(median(m.tokens_per_s for m in rows if m.tokens_per_s), 1),
                number(pooled_accepted_per_round(records, method).get(ALL_TASKS_ROW)),
                f"{kept / drafted:.0%}" if drafted else "–",
                number(mean(m.draft_forwards for m in rows if m.draft_forwards is not None), 1),
                number(mean(m.target_forwards for m in rows if m.target_forwards is not None), 1),
                format_mismatches(
                    mismatch_counts(r for r in records if r.method == method).get(ALL_TASKS_ROW)
                ),
            ]
        )
    return "\n".join(markdown_table(METHOD_HEADERS, table))
