"""The oracle report: JSON summary, markdown report and PNG plots of `dynaspec oracle`.

Definitions used everywhere below (see dynaspec.eval.oracle for how rounds are measured):

- agreeing run r of an oracle round: drafted tokens the target accepted before the draft's
  first wrong token;
- oracle lookahead L = r + 1 (docs/design/architecture.md ("The oracle lookahead")): the tokens
  the oracle policy drafts;
- censored round: drafting stopped before the first wrong token was seen (cut by
  max_new_tokens, EOS or the oracle's cap; at most about one per prompt, its last round):
  its r is only a lower bound, so it is left out of the distribution and counted apart;
- shares of rounds are binned on the agreeing run r (0, 1-2, 3-5, 6-10, >10): r = 0 is a
  round in which drafting bought nothing (the first drafted token was already wrong);
  binned on L the first bin would be empty by definition;
- forward counts: target forwards = rounds, draft forwards = draft forward calls;
- calibration: at every new-token position of the reference, the draft's teacher-forced
  confidence and whether its token equals the target's, in 10 equal-width bins;
- predicted speedup: dynaspec.eval.cost_model (pooled over the prompts of a task).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from dynaspec.core.round import Round
from dynaspec.eval.cost_model import CostProfile, pooled_speedup
from dynaspec.eval.oracle.records import PromptAnalysis, censored_round

OVERALL = "overall"  # group name of all prompts together
RUN_BINS: tuple[tuple[str, int, float], ...] = (  # (label, lowest r, highest r)
    ("0", 0, 0),
    ("1-2", 1, 2),
    ("3-5", 3, 5),
    ("6-10", 6, 10),
    (">10", 11, math.inf),
)
PERCENTILES: tuple[int, ...] = (10, 25, 50, 75, 90)
CALIBRATION_BINS = 10  # equal-width confidence bins on [0, 1]
REAL_ORACLE = "oracle (real run)"  # method name of the real oracle run's counts
TIMELINE_METHODS = ("oracle", "dynamic-0.4", "constant-5")  # drawn in the timeline plot


# ---------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------


def distribution(values: Sequence[float]) -> dict[str, float]:
    """mean, std (population), min, max and percentiles (linear interpolation) of values."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    result: dict[str, float] = {
        "count": len(values),
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values),
        "min": ordered[0],
        "max": ordered[-1],
    }
    for q in PERCENTILES:
        result[f"p{q}"] = _percentile(ordered, q)
    return result


def _percentile(ordered: Sequence[float], q: float) -> float:
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def run_shares(runs: Sequence[int]) -> dict[str, dict[str, float]]:
    """Counts and shares of agreeing runs in the RUN_BINS."""
    counts = {label: sum(low <= r <= high for r in runs) for label, low, high in RUN_BINS}
    total = len(runs)
    return {
        label: {"count": count, "share": count / total if total else 0.0}
        for label, count in counts.items()
    }


def oracle_values(rounds: Iterable[Round]) -> tuple[list[int], list[int], int]:
    """(oracle lookaheads, agreeing runs, censored rounds) of an oracle decode."""
    lookaheads, runs, censored = [], [], 0
    for r in rounds:
        if censored_round(r):
            censored += 1
        else:
            lookaheads.append(r.num_drafted)
            runs.append(r.num_accepted)
    return lookaheads, runs, censored


def calibration(pairs: Iterable[tuple[float, bool]], bins: int = CALIBRATION_BINS) -> list[dict]:
    """Acceptance rate per confidence bin [i/bins, (i+1)/bins) (the last bin includes 1)."""
    totals = [0] * bins
    hits = [0] * bins
    confidence_sums = [0.0] * bins
    for confidence, accepted in pairs:
        index = min(int(confidence * bins), bins - 1)
        totals[index] += 1
        hits[index] += bool(accepted)
        confidence_sums[index] += confidence
    return [
        {
            "low": i / bins,
            "high": (i + 1) / bins,
            "count": totals[i],
            "accepted": hits[i],
            "rate": hits[i] / totals[i] if totals[i] else None,
            "mean_confidence": confidence_sums[i] / totals[i] if totals[i] else None,
        }
        for i in range(bins)
    ]


def forward_counts(rounds: Sequence[Round]) -> dict[str, int]:
    """Target forwards (one per round) and draft forwards of one decode."""
    return {"target": len(rounds), "draft": sum(r.draft_forwards for r in rounds)}


def _decode_for_cost(
    rounds: Sequence[Round], prompt_tokens: int
) -> tuple[list[tuple[int, int]], int, int]:
    return (
        [(r.num_drafted, r.num_accepted) for r in rounds],
        sum(r.num_emitted for r in rounds),
        prompt_tokens,
    )


def method_names(analyses: Sequence[PromptAnalysis]) -> list[str]:
    """Replayed methods in the order they were run."""
    return list(analyses[0].replays) if analyses else []


# ---------------------------------------------------------------------------------------
# Benchmark results
# ---------------------------------------------------------------------------------------


# `dynaspec bench` method names that mean a replayed method of another name
BENCH_ALIASES = {"constant": "constant-5", "dynamic": "dynamic-0.4"}
SPEEDUP_FIELDS = ("speedup", "speedup_vs_target")  # first present one is read


def canonical_method(name: str) -> str:
    """Lower case, '-' for '_' and spaces, bench aliases resolved: 'Constant_5', 'constant-5'
    and bench's 'constant' (k = 5) all give 'constant-5'."""
    canonical = "-".join(name.strip().lower().replace("_", " ").split())
    return BENCH_ALIASES.get(canonical, canonical)


def read_bench_jsonl(path: str | Path) -> dict[str, Any]:
    """Median measured speedup per (task, method) from `dynaspec bench` JSONL records.

    Read defensively: lines that are not JSON objects with a string `task`, a string
    `method` and a finite number `speedup` (or `speedup_vs_target`, as dynaspec bench
    writes it: target-alone wall time / the method's, per prompt) are skipped and counted.
    Returns
    {"path", "records", "skipped", "speedups": {task: {method: median}}} where task
    `overall` pools every record of a method.
    """
    file = Path(path)
    values: dict[str, dict[str, list[float]]] = {}
    records = skipped = 0
    try:
        lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as error:
        return {"path": str(file), "records": 0, "skipped": 0, "error": str(error), "speedups": {}}
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            skipped += 1
            continue
        task = record.get("task") if isinstance(record, dict) else None
        method = record.get("method") if isinstance(record, dict) else None
        speedup = None
        if isinstance(record, dict):
            speedup = next((record[k] for k in SPEEDUP_FIELDS if record.get(k) is not None), None)
        if (
            not isinstance(task, str)
            or not isinstance(method, str)
            or isinstance(speedup, bool)
            or not isinstance(speedup, (int, float))
            or not math.isfinite(speedup)
        ):
            skipped += 1
            continue
        records += 1
        for group in (task, OVERALL):
            values.setdefault(group, {}).setdefault(method, []).append(float(speedup))
    speedups = {
        task: {method: statistics.median(v) for method, v in methods.items()}
        for task, methods in values.items()
    }
    return {"path": str(file), "records": records, "skipped": skipped, "speedups": speedups}


# ---------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------


def build_summary(
    analyses: Sequence[PromptAnalysis],
    profile: CostProfile,
    config: dict[str, Any],
    bench: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON summary: config, costs, and per task and overall the numbers of the report."""
    tasks = list(dict.fromkeys(a.record.task for a in analyses))
    groups = {task: [a for a in analyses if a.record.task == task] for task in tasks}
    if len(tasks) > 1 or not tasks:
        groups[OVERALL] = list(analyses)
    measured = (bench or {}).get("speedups", {})
    return {
        "config": config,
        "definitions": __doc__,
        "cost_profile": profile.to_json(),
        "methods": method_names(analyses),
        "tasks": tasks,
        "groups": {
            name: group_summary(group, profile, measured.get(name, {}))
            for name, group in groups.items()
        },
        "bench": None if bench is None else {k: v for k, v in bench.items() if k != "speedups"},
        "timeline": _timeline(analyses),
    }


def group_summary(
    analyses: Sequence[PromptAnalysis],
    profile: CostProfile,
    measured: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Every number of the report for one group of prompts."""
    lookaheads: list[int] = []
    runs: list[int] = []
    censored = 0
    for analysis in analyses:
        prompt_lookaheads, prompt_runs, prompt_censored = oracle_values(analysis.oracle_rounds)
        lookaheads += prompt_lookaheads
        runs += prompt_runs
        censored += prompt_censored
    real = [a for a in analyses if a.record.real_oracle is not None]
    all_real = bool(real) and len(real) == len(analyses)
    counts, predicted = _forward_counts_and_predictions(analyses, profile, all_real)
    pairs = [pair for a in analyses for pair in a.record.calibration_pairs()]
    return {
        "prompts": len(analyses),
        "new_tokens": sum(len(a.record.new_tokens) for a in analyses),
        "oracle_source": "real run" if all_real else "replay",
        "rounds": len(lookaheads) + censored,
        "censored_rounds": censored,
        "oracle_lookahead": distribution(lookaheads),
        "agreeing_run": distribution(runs),
        "run_shares": run_shares(runs),
        "lookahead_histogram": {str(k): v for k, v in sorted(Counter(lookaheads).items())},
        "per_prompt": [_per_prompt(analysis) for analysis in analyses],
        "forward_counts": counts,
        "predicted_speedup": predicted,
        "measured_speedup": dict(measured or {}),
        "calibration": calibration(pairs),
        "draft_token_accuracy": (sum(hit for _, hit in pairs) / len(pairs)) if pairs else None,
        "consistency": _consistency(real),
        "timing": _timing(analyses),
    }


def _per_prompt(analysis: PromptAnalysis) -> dict[str, Any]:
    """One prompt's oracle rounds and the mean and spread of its oracle lookahead."""
    lookaheads, _, _ = oracle_values(analysis.oracle_rounds)
    return {
        "id": analysis.record.prompt_id,
        "task": analysis.record.task,
        "new_tokens": len(analysis.record.new_tokens),
        "rounds": len(analysis.oracle_rounds),
        "mean_oracle_lookahead": statistics.fmean(lookaheads) if lookaheads else None,
        "std_oracle_lookahead": statistics.pstdev(lookaheads) if lookaheads else None,
    }


def _forward_counts_and_predictions(
    analyses: Sequence[PromptAnalysis], profile: CostProfile, all_real: bool
) -> tuple[dict[str, dict[str, int]], dict[str, float]]:
    """Per method: summed forward counts and the cost model's pooled speedup; the real
    oracle run's too when every prompt has one."""
    counts: dict[str, dict[str, int]] = {}
    predicted: dict[str, float] = {}
    for method in method_names(analyses):
        totals = Counter[str]()
        for analysis in analyses:
            totals.update(forward_counts(analysis.replays[method]))
        counts[method] = dict(totals)
        predicted[method] = pooled_speedup(
            (_decode_for_cost(a.replays[method], a.record.num_first) for a in analyses), profile
        )
    if all_real:
        totals = Counter[str]()
        for analysis in analyses:
            totals.update(forward_counts(analysis.record.real_oracle or ()))
        counts[REAL_ORACLE] = dict(totals)
        predicted[REAL_ORACLE] = pooled_speedup(
            (_decode_for_cost(a.record.real_oracle or (), a.record.num_first) for a in analyses),
            profile,
        )
    return counts, predicted


def _consistency(real: Sequence[PromptAnalysis]) -> dict[str, Any]:
    """The real oracle runs' agreement with the reference and with their replays."""
    inconsistent = [
        {"id": a.record.prompt_id, "task": a.record.task, "round": a.first_inconsistent_round()}
        for a in real
        if not a.replay_consistent
    ]
    return {
        "prompts_compared": len(real),
        "prompts_consistent": len(real) - len(inconsistent),
        "inconsistent": inconsistent,
        "real_oracle_lossless": sum(bool(a.record.real_oracle_lossless) for a in real),
        "real_oracle_diverged": [
            f"{a.record.task}/{a.record.prompt_id}"
            for a in real
            if not a.record.real_oracle_lossless
        ],
    }


def _timing(analyses: Sequence[PromptAnalysis]) -> dict[str, Any]:
    """Model time spent on the group's measurements."""
    step_times = [a.record.reference_step_s for a in analyses if a.record.reference_step_s > 0]
    return {
        "reference_decode_s": sum(a.record.reference_time_s for a in analyses),
        "real_oracle_decode_s": sum(a.record.real_oracle_time_s for a in analyses),
        "draft_trace_s": sum(a.record.trace_time_s for a in analyses),
        "target_step_in_decode_s": statistics.median(step_times) if step_times else None,
    }


def _timeline(analyses: Sequence[PromptAnalysis]) -> dict[str, Any] | None:
    """Per round of one prompt: (new tokens committed before the round, tokens drafted) for
    the oracle, dynamic-0.4 and constant-5. The prompt: the one whose oracle lookahead
    varies most (largest std) among those with at least 8 oracle rounds, else the first."""
    if not analyses:
        return None

    def spread(analysis: PromptAnalysis) -> float:
        lookaheads, _, _ = oracle_values(analysis.replays.get("oracle", ()))
        return statistics.pstdev(lookaheads) if len(lookaheads) >= 8 else -1.0

    chosen = max(analyses, key=spread)
    series = {}
    for method in TIMELINE_METHODS:
        if method not in chosen.replays:
            continue
        start, points = 0, []
        for r in chosen.replays[method]:
            points.append([start, r.num_drafted, r.num_accepted])
            start += r.num_emitted
        series[method] = points
    return {"task": chosen.record.task, "id": chosen.record.prompt_id, "series": series}
