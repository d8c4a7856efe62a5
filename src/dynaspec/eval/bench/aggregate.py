"""Numbers of a `dynaspec bench` run, from its records: medians of per-prompt ratios, pooled
acceptance, mismatch counts (definitions in dynaspec.eval.bench.report)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dynaspec.eval.bench.methods import METHODS

ALL_TASKS_ROW = "all"
METHOD_ORDER = METHODS  # the order of methods in tables and plots


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


def tasks_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(record["task"] for record in records))


def methods_of(records: Sequence[Mapping[str, Any]]) -> list[str]:
    present = set(record["method"] for record in records)
    ordered = [name for name in METHOD_ORDER if name in present]
    return ordered + sorted(present - set(ordered))
