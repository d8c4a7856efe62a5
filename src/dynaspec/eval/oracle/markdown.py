"""The markdown report of `dynaspec oracle`, one section per function, from the JSON summary
(dynaspec.eval.oracle.summary)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynaspec.eval.oracle.summary import (
    CALIBRATION_BINS,
    OVERALL,
    PERCENTILES,
    RUN_BINS,
    canonical_method,
    distribution,
)

Groups = dict[str, dict[str, Any]]  # group name -> its group_summary()


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _row(*cells: str) -> str:
    """One markdown table row."""
    return "| " + " | ".join(cells) + " |"


def _header(*cells: str) -> list[str]:
    """A markdown table's header row and separator."""
    return [_row(*cells), "|" + "---|" * len(cells)]


def render_markdown(summary: dict[str, Any], plot_names: Sequence[str] = ()) -> str:
    """The markdown report."""
    groups = summary["groups"]
    names = list(groups)
    lines = _preamble(summary["config"])
    lines += _distribution_section(groups, names)
    lines += _per_prompt_section(groups, names)
    lines += _forward_counts_section(groups, names)
    lines += _speedup_section(summary, groups, names)
    lines += _calibration_section(groups, names)
    lines += _consistency_section(groups, names)
    lines += _timing_section(groups, names)
    if plot_names:
        lines += ["", "## Plots", ""]
        lines += [f"![{name}]({name})" for name in plot_names]
    return "\n".join(lines) + "\n"


def _preamble(config: dict[str, Any]) -> list[str]:
    """Title, command, setup and definitions."""
    return [
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
        "disagreement with the target, plus one "
        "(docs/design/architecture.md#the-oracle-lookahead); the **agreeing run** "
        "r = L - 1 is what the target accepts of them. Measured by decoding with "
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
    ]


def _distribution_section(groups: Groups, names: list[str]) -> list[str]:
    """The oracle lookahead's distribution and the shares of agreeing runs."""
    lines = [
        "",
        "## Oracle lookahead distribution",
        "",
        *_header(
            "group",
            "prompts",
            "rounds (censored)",
            "mean L",
            "std L",
            *(f"p{q}" for q in PERCENTILES),
            "max",
            "mean r",
        ),
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
        *_header("group", *(f"r = {label}" for label in labels)),
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
    return lines


def _per_prompt_section(groups: Groups, names: list[str]) -> list[str]:
    """Per-prompt mean oracle lookahead: its spread per group, and every prompt."""
    lines = ["", "## Per-prompt mean oracle lookahead", ""]
    lines += [
        *_header("group", "min", "p25", "median", "p75", "max", "prompts"),
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
    return lines


def _forward_counts_section(groups: Groups, names: list[str]) -> list[str]:
    """Target / draft forwards of every method on the same text."""
    methods = list(groups[names[0]]["forward_counts"]) if names else []
    lines = [
        "",
        "## Forward counts on the same text",
        "",
        "Target / draft forward passes summed over the prompts of each group (the oracle "
        "row is the replayed oracle; the real run's counts are in its own row).",
        "",
        *_header("method", *names),
    ]
    for method in methods:
        cells = []
        for name in names:
            c = groups[name]["forward_counts"].get(method)
            cells.append(f"{c['target']} / {c['draft']}" if c else "–")
        lines.append(_row(method, *cells))
    return lines


def _speedup_section(summary: dict[str, Any], groups: Groups, names: list[str]) -> list[str]:
    """The cost model's predicted speedups, with measured ones when bench results were given."""
    profile = summary["cost_profile"]
    verify = ", ".join(f"T({n})={t * 1000:.1f}" for n, t in enumerate(profile["verify_s"], start=1))
    lines = [
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
        lines.append(_row(method, *cells))
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
    return lines


def _calibration_section(groups: Groups, names: list[str]) -> list[str]:
    """Acceptance rate by the draft's confidence."""
    lines = [
        "",
        "## Draft calibration",
        "",
        "Rate at which the draft's teacher-forced token equals the target's, by the draft's "
        "confidence in it.",
        "",
        *_header("confidence", *names),
    ]
    for index in range(CALIBRATION_BINS):
        first = groups[names[0]]["calibration"][index] if names else None
        if first is None:
            break
        cells = []
        for name in names:
            b = groups[name]["calibration"][index]
            cells.append(f"{b['rate']:.0%} (n={b['count']})" if b["rate"] is not None else "–")
        lines.append(_row(f"{first['low']:.1f}-{first['high']:.1f}", *cells))
    return lines


def _consistency_section(groups: Groups, names: list[str]) -> list[str]:
    """Real oracle = reference, and replayed oracle = real oracle."""
    lines = [
        "",
        "## Consistency checks",
        "",
        *_header(
            "group",
            "real oracle output = reference",
            "replayed oracle = real oracle, round for round",
        ),
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
    return lines


def _timing_section(groups: Groups, names: list[str]) -> list[str]:
    """Where the model time went."""
    lines = [
        "",
        "## Model time",
        "",
        *_header(
            "group",
            "reference decode",
            "real oracle decode",
            "draft trace",
            "target step in decode",
        ),
    ]
    for name in names:
        t = groups[name]["timing"]
        step = t["target_step_in_decode_s"]
        lines.append(
            f"| {name} | {t['reference_decode_s']:.1f} s | {t['real_oracle_decode_s']:.1f} s | "
            f"{t['draft_trace_s']:.1f} s | {_fmt(step * 1000 if step else None, 1)} ms |"
        )
    return lines


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
