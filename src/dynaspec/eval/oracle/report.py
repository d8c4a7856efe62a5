"""The oracle report: JSON summary, markdown report and PNG plots of `dynaspec oracle`.

Definitions used everywhere below (see dynaspec.eval.oracle.run for how rounds are measured):

- agreeing run r of an oracle round: drafted tokens the target accepted before the draft's
  first wrong token;
- oracle lookahead L = r + 1 (DESIGN.md): the tokens the oracle policy drafts;
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
from typing import TYPE_CHECKING, Any

from dynaspec.errors import MissingDependencyError
from dynaspec.eval.cost_model import CostProfile, pooled_speedup

if TYPE_CHECKING:
    from dynaspec.eval.oracle.run import PromptAnalysis, RoundInfo

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
SUMMARY_FILE = "oracle_summary.json"
REPORT_FILE = "oracle_report.md"
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


def oracle_values(rounds: Iterable[RoundInfo]) -> tuple[list[int], list[int], int]:
    """(oracle lookaheads, agreeing runs, censored rounds) of an oracle decode."""
    lookaheads, runs, censored = [], [], 0
    for r in rounds:
        if r.censored:
            censored += 1
        else:
            lookaheads.append(r.drafted)
            runs.append(r.accepted)
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


def forward_counts(rounds: Sequence[RoundInfo]) -> dict[str, int]:
    """Target forwards (one per round) and draft forwards of one decode."""
    return {"target": len(rounds), "draft": sum(r.draft_forwards for r in rounds)}


def _decode_for_cost(
    rounds: Sequence[RoundInfo], prompt_tokens: int
) -> tuple[list[tuple[int, int]], int, int]:
    return [(r.drafted, r.accepted) for r in rounds], sum(r.emitted for r in rounds), prompt_tokens


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
    per_prompt = []
    for analysis in analyses:
        prompt_lookaheads, prompt_runs, prompt_censored = oracle_values(analysis.oracle_rounds)
        lookaheads += prompt_lookaheads
        runs += prompt_runs
        censored += prompt_censored
        per_prompt.append(
            {
                "id": analysis.record.prompt_id,
                "task": analysis.record.task,
                "new_tokens": len(analysis.record.new_tokens),
                "rounds": len(analysis.oracle_rounds),
                "mean_oracle_lookahead": statistics.fmean(prompt_lookaheads)
                if prompt_lookaheads
                else None,
                "std_oracle_lookahead": statistics.pstdev(prompt_lookaheads)
                if prompt_lookaheads
                else None,
            }
        )
    methods = method_names(analyses)
    counts: dict[str, dict[str, int]] = {}
    for method in methods:
        totals = Counter[str]()
        for analysis in analyses:
            totals.update(forward_counts(analysis.replays[method]))
        counts[method] = dict(totals)
    predicted = {
        method: pooled_speedup(
            (_decode_for_cost(a.replays[method], a.record.num_first) for a in analyses), profile
        )
        for method in methods
    }
    real = [a for a in analyses if a.record.real_oracle is not None]
    if real and len(real) == len(analyses):
        totals = Counter[str]()
        for analysis in real:
            totals.update(forward_counts(analysis.record.real_oracle or ()))
        counts[REAL_ORACLE] = dict(totals)
        predicted[REAL_ORACLE] = pooled_speedup(
            (_decode_for_cost(a.record.real_oracle or (), a.record.num_first) for a in real),
            profile,
        )
    inconsistent = [
        {"id": a.record.prompt_id, "task": a.record.task, "round": a.first_inconsistent_round()}
        for a in real
        if not a.replay_consistent
    ]
    pairs = [pair for a in analyses for pair in a.record.calibration_pairs()]
    step_times = [a.record.reference_step_s for a in analyses if a.record.reference_step_s > 0]
    return {
        "prompts": len(analyses),
        "new_tokens": sum(len(a.record.new_tokens) for a in analyses),
        "oracle_source": "real run" if real and len(real) == len(analyses) else "replay",
        "rounds": len(lookaheads) + censored,
        "censored_rounds": censored,
        "oracle_lookahead": distribution(lookaheads),
        "agreeing_run": distribution(runs),
        "run_shares": run_shares(runs),
        "lookahead_histogram": {str(k): v for k, v in sorted(Counter(lookaheads).items())},
        "per_prompt": per_prompt,
        "forward_counts": counts,
        "predicted_speedup": predicted,
        "measured_speedup": dict(measured or {}),
        "calibration": calibration(pairs),
        "draft_token_accuracy": (sum(hit for _, hit in pairs) / len(pairs)) if pairs else None,
        "consistency": {
            "prompts_compared": len(real),
            "prompts_consistent": len(real) - len(inconsistent),
            "inconsistent": inconsistent,
            "real_oracle_lossless": sum(bool(a.record.real_oracle_lossless) for a in real),
            "real_oracle_diverged": [
                f"{a.record.task}/{a.record.prompt_id}"
                for a in real
                if not a.record.real_oracle_lossless
            ],
        },
        "timing": {
            "reference_decode_s": sum(a.record.reference_time_s for a in analyses),
            "real_oracle_decode_s": sum(a.record.real_oracle_time_s for a in analyses),
            "draft_trace_s": sum(a.record.trace_time_s for a in analyses),
            "target_step_in_decode_s": statistics.median(step_times) if step_times else None,
        },
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
            points.append([start, r.drafted, r.accepted])
            start += r.emitted
        series[method] = points
    return {"task": chosen.record.task, "id": chosen.record.prompt_id, "series": series}


# ---------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------


def require_plotting() -> None:
    """Raises MissingDependencyError (with the fix) when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "the oracle report draws its plots with matplotlib, which is not installed: "
            "run `pip install 'dynaspec[bench]'` (or `pip install matplotlib`)"
        ) from None


def write_report(
    summary: dict[str, Any], analyses: Sequence[PromptAnalysis], out: str | Path
) -> list[Path]:
    """Writes the JSON summary, the markdown report and the plots into `out`; returns paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(summary, out)
    summary_path = out / SUMMARY_FILE
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    report_path = out / REPORT_FILE
    report_path.write_text(render_markdown(summary, [p.name for p in plots]))
    return [summary_path, report_path, *plots]


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_markdown(summary: dict[str, Any], plot_names: Sequence[str] = ()) -> str:
    """The markdown report."""
    config = summary["config"]
    groups = summary["groups"]
    names = list(groups)
    profile = summary["cost_profile"]
    lines = [
        "# Oracle lookahead report",
        "",
        "Command:",
        "",
        "```",
        str(config.get("command", "")),
        "```",
        "",
        f"Pair: {config.get('pair')}, dtype {config.get('dtype')}, threads "
        f"{config.get('threads') or 'default'}, max new tokens {config.get('max_new_tokens')}, "
        f"prompt sample seed {config.get('seed')}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in (config.get("versions") or {}).items())
        + ".",
        "",
        "## Definitions",
        "",
        "- **Oracle lookahead** L of a round: the tokens the draft proposes before its first "
        "disagreement with the target, plus one (DESIGN.md); the **agreeing run** r = L - 1 "
        "is what the target accepts of them. Measured by decoding with "
        "`OraclePolicy(reference)` through the library's own loop, where the reference is "
        "the target's greedy output.",
        "- A round is **censored** when drafting stopped before a wrong token was seen (cut "
        "by max new tokens or EOS, usually the last round of a prompt): left out of the "
        "distribution, counted apart.",
        "- **Shares** are binned on the agreeing run r: r = 0 means the first drafted token "
        "was already wrong (drafting bought nothing); binned on L the 0 bin would be empty.",
        "- **Forward counts** of the other policies come from replaying the same text: the "
        "target replays its greedy output, the draft its teacher-forced predictions, through "
        "the same decoding loop. Exact for constant, heuristic and oracle. After the draft's "
        "first wrong token in a round its real proposals are unknown (they are rejected "
        "anyway); for their **confidence**, which decides when dynamic and adaptive stop, "
        "the replay uses the draft's teacher-forced confidence at the same position (an "
        "approximation). The adaptive policy learns the cost model's times in the replay.",
        "- **Calibration**: at every new-token position, the draft's teacher-forced "
        "confidence and whether its token equals the target's.",
        "",
        "## Oracle lookahead distribution",
        "",
        "| group | prompts | rounds (censored) | mean L | std L | p10 | p25 | p50 | p75 | p90 "
        "| max | mean r |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        g = groups[name]
        d = g["oracle_lookahead"]
        lines.append(
            f"| {name} | {g['prompts']} | {g['rounds']} ({g['censored_rounds']}) | "
            f"{_fmt(d.get('mean'))} | {_fmt(d.get('std'))} | "
            + " | ".join(_fmt(d.get(f"p{q}"), 1) for q in PERCENTILES)
            + f" | {_fmt(d.get('max'))} | {_fmt(g['agreeing_run'].get('mean'))} |"
        )
    labels = [label for label, _, _ in RUN_BINS]
    lines += [
        "",
        "Share of rounds by agreeing run r (tokens of the draft the target accepts):",
        "",
        "| group | " + " | ".join(f"r = {label}" for label in labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for name in names:
        shares = groups[name]["run_shares"]
        lines.append(
            f"| {name} | "
            + " | ".join(
                f"{shares[label]['share']:.0%} ({shares[label]['count']})" for label in labels
            )
            + " |"
        )
    lines += ["", "## Per-prompt mean oracle lookahead", ""]
    lines += [
        "| group | min | p25 | median | p75 | max | prompts |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        means = [
            p["mean_oracle_lookahead"]
            for p in groups[name]["per_prompt"]
            if p["mean_oracle_lookahead"] is not None
        ]
        d = distribution(means)
        lines.append(
            f"| {name} | {_fmt(d.get('min'))} | {_fmt(d.get('p25'))} | {_fmt(d.get('p50'))} | "
            f"{_fmt(d.get('p75'))} | {_fmt(d.get('max'))} | {len(means)} |"
        )
    lines += ["", "Per prompt (id: mean L over its rounds), lowest first:", ""]
    for name in names:
        if name == OVERALL:
            continue
        ranked = sorted(
            (p for p in groups[name]["per_prompt"] if p["mean_oracle_lookahead"] is not None),
            key=lambda p: p["mean_oracle_lookahead"],
        )
        lines.append(
            f"- {name}: "
            + ", ".join(f"{p['id']}: {p['mean_oracle_lookahead']:.2f}" for p in ranked)
        )
    methods = list(groups[names[0]]["forward_counts"]) if names else []
    lines += [
        "",
        "## Forward counts on the same text",
        "",
        "Target / draft forward passes summed over the prompts of each group (the oracle "
        "row is the replayed oracle; the real run's counts are in its own row).",
        "",
        "| method | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for method in methods:
        cells = []
        for name in names:
            c = groups[name]["forward_counts"].get(method)
            cells.append(f"{c['target']} / {c['draft']}" if c else "–")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    verify = ", ".join(f"T({n})={t * 1000:.1f}" for n, t in enumerate(profile["verify_s"], start=1))
    lines += [
        "",
        "## Expected speedup (cost model)",
        "",
        "Predicted time of a decode = prompt tokens x (p_t + p_d if it drafts at all) + sum "
        "over its rounds of (drafted x c_d + T(drafted + 1)); target alone = prompt tokens x "
        "p_t + new tokens x T(1); predicted speedup = the ratio, pooled over the prompts of a "
        "group (dynaspec/cost_model.py). Measured on this machine: "
        f"c_d = {profile['draft_token_s'] * 1000:.1f} ms per draft token "
        f"({profile['draft_cost_ratio']:.2f} target steps), {verify} ms; " + _prefill_text(profile),
        "",
    ]
    any_measured = any(groups[name]["measured_speedup"] for name in names)
    header = "| method | " + " | ".join(
        f"{name} predicted | {name} measured" if any_measured else name for name in names
    )
    lines += [header + " |", "|---|" + "---|" * (len(names) * (2 if any_measured else 1))]
    for method in list(groups[names[0]]["predicted_speedup"]) if names else []:
        cells = []
        for name in names:
            cells.append(f"{groups[name]['predicted_speedup'][method]:.2f}x")
            if any_measured:
                value = _measured(groups[name]["measured_speedup"], method)
                cells.append(f"{value:.2f}x" if value is not None else "–")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    if any_measured:
        bench = summary.get("bench") or {}
        lines += [
            "",
            f"Measured: median speedup per method from {bench.get('path')} "
            f"({bench.get('records')} records, {bench.get('skipped')} lines skipped). "
            "Measured methods without a replayed counterpart:",
            "",
        ]
        for name in names:
            extra = {
                method: value
                for method, value in groups[name]["measured_speedup"].items()
                if not _is_replayed(method, groups[name]["predicted_speedup"])
            }
            if extra:
                lines.append(
                    f"- {name}: " + ", ".join(f"{m} {v:.2f}x" for m, v in sorted(extra.items()))
                )
    lines += [
        "",
        "## Draft calibration",
        "",
        "Rate at which the draft's teacher-forced token equals the target's, by the draft's "
        "confidence in it.",
        "",
        "| confidence | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for index in range(CALIBRATION_BINS):
        first = groups[names[0]]["calibration"][index] if names else None
        if first is None:
            break
        cells = []
        for name in names:
            b = groups[name]["calibration"][index]
            cells.append(f"{b['rate']:.0%} (n={b['count']})" if b["rate"] is not None else "–")
        lines.append(f"| {first['low']:.1f}-{first['high']:.1f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Consistency checks",
        "",
        "| group | real oracle output = reference | replayed oracle = real oracle, round "
        "for round |",
        "|---|---|---|",
    ]
    for name in names:
        c = groups[name]["consistency"]
        compared = c["prompts_compared"]
        lines.append(
            f"| {name} | {c['real_oracle_lossless']}/{compared} | "
            f"{c['prompts_consistent']}/{compared} |"
        )
    inconsistent = [
        i for name in names if name != OVERALL for i in groups[name]["consistency"]["inconsistent"]
    ]
    diverged = [
        d
        for name in names
        if name != OVERALL
        for d in groups[name]["consistency"]["real_oracle_diverged"]
    ]
    if diverged:
        lines += [
            "",
            "Real oracle runs whose output differs from the target-alone output (in bf16 "
            "expected only at near-ties of the target's top-2 logits; `dynaspec bench` "
            "classifies such divergences): " + ", ".join(diverged),
        ]
    if inconsistent:
        lines += [
            "",
            "Prompts where the replay differs (first differing round; a near-tie of the "
            "draft's top-2 logits between the whole-sequence and the incremental forward): "
            + ", ".join(f"{i['task']}/{i['id']} (round {i['round']})" for i in inconsistent),
        ]
    lines += [
        "",
        "## Model time",
        "",
        "| group | reference decode | real oracle decode | draft trace | target step in decode |",
        "|---|---|---|---|---|",
    ]
    for name in names:
        t = groups[name]["timing"]
        step = t["target_step_in_decode_s"]
        lines.append(
            f"| {name} | {t['reference_decode_s']:.1f} s | {t['real_oracle_decode_s']:.1f} s | "
            f"{t['draft_trace_s']:.1f} s | {_fmt(step * 1000 if step else None, 1)} ms |"
        )
    if plot_names:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}]({name})" for name in plot_names]
    return "\n".join(lines) + "\n"


def _measured(measured: dict[str, float], method: str) -> float | None:
    """The measured speedup of a replayed method, names matched by canonical_method."""
    wanted = canonical_method(method)
    for name, value in measured.items():
        if canonical_method(name) == wanted:
            return value
    return None


def _prefill_text(profile: dict[str, Any]) -> str:
    target, draft = (
        profile.get("target_prefill_token_s", 0),
        profile.get("draft_prefill_token_s", 0),
    )
    if not target:
        return "prefill not measured (p_t = p_d = 0: left out)."
    return f"prefill per prompt token p_t = {target * 1000:.1f} ms, p_d = {draft * 1000:.1f} ms."


def _is_replayed(name: str, predicted: dict[str, float]) -> bool:
    return any(_measured({name: 0.0}, method) is not None for method in predicted)


# ---------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------


def write_plots(summary: dict[str, Any], out: Path) -> list[Path]:
    """Draws the PNG plots into `out`; returns their paths."""
    require_plotting()
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    groups = summary["groups"]
    tasks = summary["tasks"] or list(groups)
    paths = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        fig.savefig(path, dpi=100)
        paths.append(path)

    # 1. histogram of the oracle lookahead per task
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
    save(fig, "oracle_lookahead_hist.png")

    # 2. per-prompt mean oracle lookahead
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
    save(fig, "per_prompt_mean_lookahead.png")

    # 3. forward counts vs static lookahead, oracle marked; dynamic vs threshold
    methods = summary["methods"]
    static = [(int(m.split("-")[1]), m) for m in methods if m.startswith("constant-")]
    dynamic = [(float(m.split("-", 1)[1]), m) for m in methods if m.startswith("dynamic-")]
    fig = Figure(figsize=(10, 6.4), layout="constrained")
    axes = fig.subplots(2, 2)
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:gray"]
    for row, kind in enumerate(("target", "draft")):
        for task, color in zip(tasks, colors * 4, strict=False):
            counts = groups[task]["forward_counts"]
            if static:
                axes[row][0].plot(
                    [k for k, _ in static],
                    [counts[m][kind] for _, m in static],
                    marker="o",
                    color=color,
                    label=task,
                )
                axes[row][0].axhline(counts["oracle"][kind], color=color, linestyle="--")
            if dynamic:
                axes[row][1].plot(
                    [t for t, _ in dynamic],
                    [counts[m][kind] for _, m in dynamic],
                    marker="s",
                    color=color,
                    label=task,
                )
                axes[row][1].axhline(counts["oracle"][kind], color=color, linestyle="--")
        axes[row][0].set_xlabel("static lookahead k")
        axes[row][1].set_xlabel("dynamic confidence threshold (max 20 tokens)")
        for ax in axes[row]:
            ax.set_ylabel(f"{kind} forward passes")
            ax.legend(title="dashed: oracle", fontsize=8)
    save(fig, "forward_counts.png")

    # 4. calibration curve
    fig = Figure(figsize=(5.5, 6), layout="constrained")
    ax, ax_count = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    ax.plot([0, 1], [0, 1], color="black", linestyle=":", label="calibrated")
    for task, color in zip(tasks, colors * 4, strict=False):
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
    save(fig, "calibration.png")

    # 5. timeline of one prompt
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
        save(fig, "timeline.png")

    # 6. predicted speedup vs static lookahead
    fig = Figure(figsize=(6, 3.6), layout="constrained")
    ax = fig.subplots()
    for task, color in zip(tasks, colors * 4, strict=False):
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
    save(fig, "predicted_speedup.png")
    return paths
