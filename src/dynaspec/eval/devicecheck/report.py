"""The device check's markdown summary, rendered from its JSON record."""

from __future__ import annotations

from typing import Any


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render_markdown(record: dict[str, Any]) -> str:
    provenance = record["provenance"]
    versions = provenance["versions"]
    git = provenance["git"]
    title = "dry run (CPU, tiny models)" if record["dry_run"] else provenance["device_name"]
    lines = [
        f"# dynaspec devicecheck: {title}",
        "",
        f"Command: `{record['command']}`; started {record['started']}, "
        f"{record.get('elapsed_s', 0):.0f} s. torch {versions.get('torch')}, transformers "
        f"{versions.get('transformers')}, Python {versions.get('python')}; git "
        f"{(git.get('sha') or '?')[:10]}{' (dirty)' if git.get('dirty') else ''}; CPU "
        f"{provenance['machine'].get('cpu_model')}.",
        "",
        "Random weights of the real shapes in bf16; costs do not depend on the weights' values.",
        "",
    ]
    lines += _tests_lines(record.get("tests"))
    lines += _cost_lines(record)
    lines += _overhead_lines(record)
    lines += _graph_lines(record)
    if record["skipped"]:
        lines += ["## Skipped", ""] + [f"- {note}" for note in record["skipped"]] + [""]
    return "\n".join(lines)


def _tests_lines(tests: dict[str, Any] | None) -> list[str]:
    if tests is None:
        return ["## Tests marked cuda", "", "not run yet", ""]
    detail = tests.get("summary") or tests.get("reason") or ""
    seconds = f", {tests['seconds']} s" if "seconds" in tests else ""
    return ["## Tests marked cuda", "", f"**{tests['outcome']}**: {detail}{seconds}", ""]


def _cost_lines(record: dict[str, Any]) -> list[str]:
    settings = record["settings"]
    lines = [
        "## Costs",
        "",
        f"After a {settings['prefix_tokens']}-token prefix; median of {settings['cost_reps']} "
        "repetition(s), each timed after the device finished. T(n): the target's forward over "
        "n new tokens; c_d: the draft's forward over one token; p: prefill per prompt token.",
        "",
        "| pair | variant | T(1) ms | T(4)/T(1) | T(8)/T(1) | T(16)/T(1) | T(32)/T(1) "
        "| c_d ms | c_d/T(1) | p target ms | p draft ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for pair in record["pairs"]:
        if "error" in pair:
            notes.append(f"- {pair['name']}: FAILED: {pair['error']}")
        for variant, data in pair["variants"].items():
            if "costs" not in data:
                why = data.get("skipped") or f"FAILED: {data.get('error')}"
                notes.append(f"- {pair['name']}, {variant}: {why}")
                continue
            costs = data["costs"]
            ratio = costs["verify_ratio"]

            def at(n: int, ratio: list[float] = ratio) -> str:
                return _ratio(ratio[n - 1]) if n <= len(ratio) else "-"

            lines.append(
                f"| {pair['name']} | {variant} | {_ms(costs['verify_s'][0])} | {at(4)} | "
                f"{at(8)} | {at(16)} | {at(32)} | {_ms(costs['draft_token_s'])} | "
                f"{_ratio(costs['draft_cost_ratio'])} | {_ms(costs['target_prefill_token_s'])} "
                f"| {_ms(costs['draft_prefill_token_s'])} |"
            )
    return lines + [""] + notes + ([""] if notes else [])


def _overhead_lines(record: dict[str, Any]) -> list[str]:
    lines = [
        "## Per-round overhead (eager)",
        "",
        "A round's wall time minus its model forwards (every forward timed with the device "
        "synchronised), as the slope over a short and a long call; the target drafts for "
        "itself with the constant schedule, so both libraries run the same rounds. "
        "`alone`: the target decoding alone (one round per token). Wall/token: a long call "
        "without the timing hooks.",
        "",
        "| pair | method | overhead ms/round | set-up ms | forwards ms/round | rounds "
        "| acceptance | wall ms/token |",
        "|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for pair in record["pairs"]:
        results = pair["variants"].get("eager", {}).get("overhead")
        if not results:
            continue
        for method in (
            "dynaspec",
            "transformers",
            "dynaspec_target_alone",
            "transformers_target_alone",
        ):
            data = results.get(method, {})
            if "per_round_s" not in data:
                why = data.get("skipped") or f"FAILED: {data.get('error', '-')}"
                lines.append(f"| {pair['name']} | {method} | {why} |||||| ")
                continue
            acceptance = "-" if data["acceptance"] is None else f"{data['acceptance']:.0%}"
            lines.append(
                f"| {pair['name']} | {method.replace('_target_alone', ' alone')} | "
                f"{_ms(data['per_round_s'])} | {_ms(data['setup_s'])} | "
                f"{_ms(data['forward_per_round_s'])} | {data['rounds_per_call']:.0f} | "
                f"{acceptance} | {_ms(data['wall_per_token_s'])} |"
            )
        ours, theirs = results.get("dynaspec", {}), results.get("transformers", {})
        if "per_round_s" in ours and "per_round_s" in theirs:
            verdict = "no higher" if ours["per_round_s"] <= theirs["per_round_s"] else "HIGHER"
            verdicts.append(
                f"- {pair['name']}: dynaspec {_ms(ours['per_round_s'])} ms vs transformers "
                f"{_ms(theirs['per_round_s'])} ms per round: {verdict}"
            )
    return lines + [""] + verdicts + ([""] if verdicts else [])


def _graph_lines(record: dict[str, Any]) -> list[str]:
    """The graph path: T per bucket, the draft's step, capture time, overheads, batches."""
    measured = [
        (pair["name"], pair["variants"]["graphs"])
        for pair in record["pairs"]
        if "costs" in pair["variants"].get("graphs", {})
    ]
    if not measured:
        return []
    lines = [
        "## Graph path (static cache, CUDA graphs per bucket)",
        "",
        "T(b): the target's forward padded to bucket b; c_d: the draft's one-token step; "
        "o: dynaspec's time per round outside the forwards (alone: one round per token; "
        "self: the target drafting for itself, k = 3).",
        "",
        "| pair | graphs | capture s | T per bucket ms | c_d ms | c_d/T(1) | o alone ms "
        "| o self ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    batches = []
    for name, data in measured:
        costs, overhead = data["costs"], data.get("overhead", {})
        buckets = " / ".join(f"{b}: {_ms(t)}" for b, t in data["bucket_s"].items())
        alone = overhead.get("dynaspec_target_alone", {}).get("per_round_s")
        self_drafted = overhead.get("dynaspec", {}).get("per_round_s")
        lines.append(
            f"| {name} | {'captured' if data['graphs_enabled'] else 'none (CPU)'} | "
            f"{data['capture_s']:.1f} | {buckets} | {_ms(costs['draft_token_s'])} | "
            f"{_ratio(costs['draft_cost_ratio'])} | {_ms(alone)} | {_ms(self_drafted)} |"
        )
        if "batch" in data:
            batches.append((name, data["batch"]))
    lines.append("")
    for name, batch in batches:
        widths = batch["widths"]
        lines += [
            f"Batches, {name} ({_batch_mode(batch)}): T_B(n) ms, rows x n tokens; D_B: the "
            "draft's step",
            "",
            "| B | " + " | ".join(f"T_B({n})" for n in widths) + " | D_B |",
            "|---|" + "---|" * (len(widths) + 1),
        ]
        for size in batch["sizes"]:
            times = batch["verify_s"][str(size)]
            cells = [_ms(times[str(n)]) for n in widths] + [_ms(batch["draft_step_s"][str(size)])]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += _run_lines(name, batch.get("runs"))
    return lines


def _batch_mode(batch: dict[str, Any]) -> str:
    """How the batch forwards ran: captured, bucketed on the CPU, or neither."""
    if batch.get("graphs"):
        return f"CUDA graphs per bucket of rows and tokens, {batch['captured_graphs']} captured"
    return "bucketed, not captured (CPU)" if batch.get("bucketed") else "no graphs"


def _run_lines(name: str, runs: dict[str, Any] | None) -> list[str]:
    """Whole batched decodes: the target alone and adaptive beside a draft that never agrees."""
    if not runs:
        return []
    lines = [
        f"Batched decodes, {name}: tokens/s of the target alone and of `adaptive` with the "
        "random-weight draft (it never agrees: what the rule costs where drafting cannot pay)",
        "",
        "| B | alone tok/s | adaptive tok/s | adaptive / alone |",
        "|---|---|---|---|",
    ]
    for size, run in runs.items():
        lines.append(
            f"| {size} | {run['alone_tok_s']:.0f} | {run['adaptive_tok_s']:.0f} | "
            f"{run['adaptive_over_alone']:.2f}x |"
        )
    return lines + [""]
