"""Numbers of a `dynaspec bench` run, from its records: medians of per-prompt ratios, pooled
acceptance, mismatch counts (definitions in dynaspec.eval.bench.report)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

from dynaspec.eval.bench.measurement import Measurement, speedup
from dynaspec.eval.bench.methods import BASELINE, METHODS, PEER_FAMILIES
from dynaspec.eval.bench.record import BenchRecord

ALL_TASKS_ROW = "all"
METHOD_ORDER = METHODS  # the order of methods in tables and plots


def median(values: Iterable[float]) -> float | None:
    """The median (numpy's), None for no values."""
    found = list(values)
    return float(np.median(found)) if found else None


def mean(values: Iterable[float]) -> float | None:
    """The mean (numpy's), None for no values."""
    found = list(values)
    return float(np.mean(found)) if found else None


def per_prompt_ratios(
    records: Iterable[BenchRecord],
    numerator: str,
    denominator: str,
    value: str = "wall_time_s",
) -> dict[str, list[float]]:
    """task -> [numerator's measurement `value` / denominator's, per prompt].

    Records are paired by (task, prompt_id); prompts lacking either method, or with a zero
    or missing value, are left out.
    """

    def measured(measurement: Measurement) -> bool:
        amount = getattr(measurement, value)
        return isinstance(amount, (int, float)) and amount > 0

    ratios: dict[str, list[float]] = defaultdict(list)
    for task, top, bottom in _paired(records, numerator, denominator, measured):
        ratios[task].append(getattr(top, value) / getattr(bottom, value))
    return dict(ratios)


def _paired(
    records: Iterable[BenchRecord],
    first: str,
    second: str,
    keep: Callable[[Measurement], bool] = lambda measurement: True,
) -> Iterator[tuple[str, Measurement, Measurement]]:
    """(task, first's measurement, second's) for every prompt, paired by (task, prompt_id),
    that has both methods among the records whose measurement `keep` accepts."""
    by_prompt: dict[tuple[str, str], dict[str, Measurement]] = defaultdict(dict)
    for record in records:
        if record.method in (first, second) and keep(record.measurement):
            by_prompt[(record.task, str(record.prompt_id))][record.method] = record.measurement
    for (task, _), measured in by_prompt.items():
        if first in measured and second in measured:
            yield task, measured[first], measured[second]


def median_of_ratios(
    records: Iterable[BenchRecord],
    numerator: str,
    denominator: str,
    value: str = "wall_time_s",
    *,
    all_tasks: bool = True,
) -> dict[str, float]:
    """task -> median over prompts of the per-prompt ratio (see per_prompt_ratios).

    With `all_tasks`, the key "all" holds the median over every prompt of every task.
    Speedup over the target alone: `speedups`.
    """
    return _medians(per_prompt_ratios(records, numerator, denominator, value), all_tasks)


def speedups(
    records: Iterable[BenchRecord], method: str, baseline: str = BASELINE
) -> dict[str, float]:
    """task (and "all") -> median over prompts of `method`'s speedup over `baseline`
    (`measurement.speedup`: tokens per second, so no credit for a shorter text where a model
    of another precision or another engine stops at an EOS sooner; for outputs as long, the
    ratio of the wall times)."""
    ratios: dict[str, list[float]] = defaultdict(list)
    for task, this, target in _paired(records, method, baseline):
        ratio = speedup(this, target)
        if ratio is not None:
            ratios[task].append(ratio)
    return _medians(ratios, all_tasks=True)


def _medians(ratios: dict[str, list[float]], all_tasks: bool) -> dict[str, float]:
    """task -> the median of its ratios; with `all_tasks`, "all" -> the median of them all."""
    medians = {task: float(np.median(values)) for task, values in ratios.items() if values}
    pooled = [ratio for values in ratios.values() for ratio in values]
    if all_tasks and pooled:
        medians[ALL_TASKS_ROW] = float(np.median(pooled))
    return medians


def pooled_accepted_per_round(records: Iterable[BenchRecord], method: str) -> dict[str, float]:
    """task (and "all") -> sum of accepted drafted tokens / sum of rounds of `method`."""
    accepted: Counter[str] = Counter()
    rounds: Counter[str] = Counter()
    for record in records:
        per_round = record.measurement.accepted_per_round
        if record.method != method or not per_round:
            continue
        for task in (record.task, ALL_TASKS_ROW):
            accepted[task] += sum(per_round)
            rounds[task] += len(per_round)
    return {task: accepted[task] / rounds[task] for task in rounds if rounds[task]}


def mismatch_kind(record: BenchRecord) -> str:
    """A mismatch's kind: "tie" or "BUG" (classified), or "peer" (another engine's output
    that differs from its own target alone's: not dynaspec's, not classified)."""
    if record.mismatch is not None and record.mismatch.kind:
        return record.mismatch.kind
    return "peer" if record.measurement.family in PEER_FAMILIES else "BUG"


def mismatch_counts(records: Iterable[BenchRecord]) -> dict[str, Counter[str]]:
    """task (and "all") -> Counter of mismatch kinds ("tie", "BUG", "peer") over every
    method."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        for task in (record.task, ALL_TASKS_ROW):
            counts[task]["records"] += 1
            if record.matches_target is False:  # None: not compared
                counts[task][mismatch_kind(record)] += 1
    return dict(counts)


def tasks_of(records: Sequence[BenchRecord]) -> list[str]:
    return list(dict.fromkeys(record.task for record in records))


def methods_of(records: Sequence[BenchRecord]) -> list[str]:
    present = {record.method for record in records}
    ordered = [name for name in METHOD_ORDER if name in present]
    return ordered + sorted(present - set(ordered))
