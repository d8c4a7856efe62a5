"""Projected speedups: real acceptance traces replayed under costs measured elsewhere.

`dynaspec devicecheck` measures what a pair of real shapes costs on a GPU (random weights:
costs, not acceptance). The oracle analysis recorded, on real text, what a real draft
proposes and what the target accepts (`benchmarks/oracle/oracle_records.jsonl`, the
Qwen2.5-Coder 1.5B/0.5B pair on a CPU). Replaying those records (`dynaspec.eval.oracle.
replay`) under a GPU pair's costs (`dynaspec.eval.cost_model`) projects each policy's
speedup over the target alone on that GPU, for that acceptance. The adaptive policy learns
the projected costs during the replay, as it would learn measured ones.

The profile of a pair: T(n), the draft's cost per token c_d and both prefills as measured;
the per-round overhead o is dynaspec's target-alone overhead per round (a round that drafts
nothing), and what a self-drafted round of k tokens costs beyond it is charged per drafted
token: c_d' = c_d + max(0, (o_round(k) - o) / k). Baseline and speculative decodes pay the
same o per round.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaspec.core.round import Round
from dynaspec.errors import ConfigError, InputError
from dynaspec.eval.batch_projection import batch_rows, render_batch_markdown, trace_acceptance
from dynaspec.eval.cost_model import CostProfile, pooled_speedup
from dynaspec.eval.oracle.methods import default_policy_specs, dynamic_name
from dynaspec.eval.oracle.records import ORACLE, PromptRecord
from dynaspec.eval.oracle.replay import ReplayText, replay
from dynaspec.eval.provenance import command_line, git_state, library_versions
from dynaspec.policies.adaptive import AdaptivePolicy

LABEL = "projected: GPU costs, acceptance from the Qwen2.5-Coder 1.5B/0.5B traces measured on CPU"
DEFAULT_RECORDS = Path("benchmarks/oracle/oracle_records.jsonl")
# table column -> the replayed method (dynamic: dynaspec's default, 20 tokens, threshold 0.4)
COLUMNS = {
    "heuristic": "heuristic",
    "dynamic": dynamic_name(0.4),
    "adaptive": "adaptive",
    "oracle": ORACLE,
}
ALL_TASKS = "all"  # the row pooled over every task of a pair
GOAL_SHARE_OF_ORACLE = 0.9  # the goal: adaptive >= 90% of the oracle


@dataclass(frozen=True)
class PairCosts:
    """A measured pair, as the projection uses it."""

    name: str  # the devicecheck pair name, e.g. "qwen2.5-7b/0.5b"
    profile: CostProfile  # the projection's profile (see the module docstring)
    derivation: dict[str, float]  # the measured numbers the profile came from
    buckets: tuple[int, ...] = ()  # widths the target's forwards were padded to (graphs)
    batch: dict[str, Any] | None = None  # batch costs (eval/batch_projection.py), if measured


def projection_profile(
    costs: dict[str, Any], overhead: dict[str, Any] | None
) -> tuple[CostProfile, dict[str, float]]:
    """(profile, the numbers it came from) of one devicecheck variant (its `costs` and
    `overhead` blocks); see the module docstring. Without overheads o = 0, c_d as measured."""
    measured = CostProfile.from_json(costs)
    round_o = alone_o = 0.0
    lookahead = 1
    if overhead:
        alone_o = overhead.get("dynaspec_target_alone", {}).get("per_round_s", 0.0)
        round_o = overhead.get("dynaspec", {}).get("per_round_s", alone_o)
        lookahead = int(overhead.get("lookahead", 1))
    base = max(alone_o, 0.0)
    per_token = max((round_o - base) / lookahead, 0.0)
    profile = CostProfile(
        draft_token_s=measured.draft_token_s + per_token,
        verify_s=measured.verify_s,
        overhead_s=base,
        target_prefill_token_s=measured.target_prefill_token_s,
        draft_prefill_token_s=measured.draft_prefill_token_s,
    )
    derivation = {
        "overhead_per_round_alone_s": alone_o,
        "overhead_per_round_self_draft_s": round_o,
        "lookahead": lookahead,
        "overhead_per_drafted_token_s": per_token,
    }
    return profile, derivation


def read_pair_costs(path: Path, variant: str = "eager") -> list[PairCosts]:
    """Every pair of a devicecheck JSON that has `variant` costs."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        pairs = data["pairs"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f"--costs {path} is not a devicecheck JSON ({type(error).__name__}: {error}): pass "
            "the devicecheck.json that `dynaspec devicecheck --out DIR` wrote"
        ) from error
    result = []
    for pair in pairs:
        variants = pair.get("variants", {})
        data = variants.get(variant, {})
        if "costs" in data:
            # The loop around the forwards is the same for every variant: a variant measured
            # without overheads (compiled) takes the eager ones.
            overhead = data.get("overhead") or variants.get("eager", {}).get("overhead")
            profile, derivation = projection_profile(data["costs"], overhead)
            buckets = tuple(int(b) for b in data.get("buckets", ()))
            result.append(PairCosts(pair["name"], profile, derivation, buckets, data.get("batch")))
    if not result:
        raise InputError(f"--costs {path} has no pair with {variant} costs: nothing to project")
    return result


def read_records(path: Path) -> list[PromptRecord]:
    """The oracle records (one PromptRecord per JSONL line)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        return [PromptRecord.from_json(json.loads(line)) for line in lines if line.strip()]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise InputError(
            f"--records {path} could not be read as oracle records ({type(error).__name__}: "
            f"{error}): pass the oracle_records.jsonl that `dynaspec oracle` wrote"
        ) from error


def project(records: Sequence[PromptRecord], pairs: Sequence[PairCosts]) -> list[dict[str, Any]]:
    """One row per (pair, task) and per pair over all tasks: projected speedup per column."""
    specs = {spec.name: spec for spec in default_policy_specs(static=(), thresholds=(0.4,))}
    texts = [ReplayText.of(record) for record in records]

    def replays(
        method: str, profile: CostProfile | None, buckets: tuple[int, ...] = ()
    ) -> list[tuple[Round, ...]]:
        make = _with_buckets(specs[method].make, buckets)
        return [replay(r, make, profile, t) for r, t in zip(records, texts, strict=True)]

    # the policies that do not learn costs replay the same rounds under any costs
    fixed = {method: replays(method, None) for method in COLUMNS.values() if method != "adaptive"}
    tasks = sorted({record.task for record in records})
    rows = []
    for pair in pairs:
        adaptive = replays("adaptive", pair.profile, pair.buckets)
        decodes = fixed | {"adaptive": adaptive}
        for task in [*tasks, ALL_TASKS]:
            chosen = [i for i, r in enumerate(records) if task in (ALL_TASKS, r.task)]
            speedups = {
                column: _pooled(decodes[method], records, chosen, pair.profile)
                for column, method in COLUMNS.items()
            }
            rows.append(_row(pair.name, task, len(chosen), speedups))
    return rows


def _with_buckets(make: Any, buckets: tuple[int, ...]) -> Any:
    """`make`, whose adaptive policies also know the target's buckets (a graphed target:
    a verification costs its bucket's)."""
    if not buckets:
        return make

    def build(reference: Any) -> Any:
        policy = make(reference)
        if isinstance(policy, AdaptivePolicy):
            policy.expect_buckets(buckets)
        return policy

    return build


def _pooled(
    rounds: Sequence[tuple[Round, ...]],
    records: Sequence[PromptRecord],
    chosen: Sequence[int],
    profile: CostProfile,
) -> float:
    return pooled_speedup(
        (
            (
                [(r.num_drafted, r.num_accepted) for r in rounds[i]],
                sum(r.num_emitted for r in rounds[i]),
                records[i].num_first,
            )
            for i in chosen
        ),
        profile,
    )


def _row(pair: str, task: str, prompts: int, speedups: dict[str, float]) -> dict[str, Any]:
    adaptive, oracle = speedups["adaptive"], speedups["oracle"]
    best_simple = max(speedups["dynamic"], speedups["heuristic"])
    return {
        "pair": pair,
        "task": task,
        "prompts": prompts,
        **speedups,
        "adaptive_share_of_oracle": adaptive / oracle if oracle > 0 else None,
        "goal_met": adaptive >= best_simple and adaptive >= GOAL_SHARE_OF_ORACLE * oracle,
    }


def render_markdown(result: dict[str, Any]) -> str:
    title = result["label"]
    if result.get("costs_dry_run"):
        title = "DRY RUN, tiny models' CPU costs (not a GPU): " + title
    lines = [
        f"# {title}",
        "",
        f"Command: `{result['command']}`. Costs: `{result['costs_file']}` ({result['variant']}, "
        f"{result['costs_device']}); acceptance: `{result['records_file']}` "
        f"({result['prompts']} prompts). Speedup over the target alone, pooled over the "
        "prompts (sum of times). dynamic: 20 tokens, threshold 0.4; heuristic: start 5, +2/-1; "
        "adaptive learns the projected costs during the replay; oracle: drafts exactly the "
        "agreeing run + 1. Goal: adaptive >= dynamic and heuristic, and >= 90% of oracle.",
        "",
        "| pair | task | prompts | heuristic | dynamic | adaptive | oracle | adaptive/oracle "
        "| goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in result["rows"]:
        share = row["adaptive_share_of_oracle"]
        cells = [row["pair"], row["task"], str(row["prompts"])]
        cells += [f"{row[column]:.2f}x" for column in COLUMNS]
        cells += ["-" if share is None else f"{share:.0%}", "met" if row["goal_met"] else "NOT met"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Profiles (ms; c_d includes dynaspec's overhead per drafted token):", ""]
    lines += ["| pair | T(1) | T(5)/T(1) | c_d | c_d/T(1) | o per round | p target | p draft |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    for name, profile in result["profiles"].items():
        ratio = profile["verify_ratio"][min(4, len(profile["verify_ratio"]) - 1)]
        cells = [
            f"{profile['verify_s'][0] * 1e3:.2f}",
            f"{ratio:.2f}",
            f"{profile['draft_token_s'] * 1e3:.2f}",
            f"{profile['draft_cost_ratio']:.2f}",
            f"{profile['overhead_s'] * 1e3:.3f}",
            f"{profile['target_prefill_token_s'] * 1e3:.3f}",
            f"{profile['draft_prefill_token_s'] * 1e3:.3f}",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += render_batch_markdown(result.get("batch_rows", ()), result.get("batch_acceptance", 0))
    return "\n".join(lines) + "\n"


def add_project_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--costs", required=True, help="devicecheck.json with the GPU costs")
    parser.add_argument(
        "--records",
        default=str(DEFAULT_RECORDS),
        help=f"oracle records with the acceptance traces (default {DEFAULT_RECORDS})",
    )
    parser.add_argument("--out", required=True, help="folder for projection.json and .md")
    parser.add_argument(
        "--variant", default="eager", help="devicecheck variant whose costs to use (eager)"
    )


def run_project(args: argparse.Namespace) -> int:
    costs_path, records_path = Path(args.costs), Path(args.records)
    if not records_path.is_file():
        raise ConfigError(
            f"--records {records_path} does not exist: run from the repository root, or pass "
            "the oracle_records.jsonl that `dynaspec oracle` wrote"
        )
    pairs = read_pair_costs(costs_path, args.variant)
    records = read_records(records_path)
    costs_data = json.loads(costs_path.read_text(encoding="utf-8"))
    result = {
        "label": LABEL,
        "command": command_line() or f"dynaspec project --costs {costs_path}",
        "costs_file": str(costs_path),
        "costs_device": costs_data.get("provenance", {}).get("device_name"),
        "costs_dry_run": costs_data.get("dry_run"),
        "variant": args.variant,
        "records_file": str(records_path),
        "prompts": len(records),
        "profiles": {pair.name: pair.profile.to_json() for pair in pairs},
        "derivations": {pair.name: pair.derivation for pair in pairs},
        "versions": library_versions(),
        "git": git_state(),
        "rows": project(records, pairs),
    }
    acceptance = trace_acceptance(records)
    result["batch_acceptance"] = acceptance
    result["batch_rows"] = [
        row for pair in pairs if pair.batch for row in batch_rows(pair.name, pair.batch, acceptance)
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "projection.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    markdown = render_markdown(result)
    (out / "projection.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    return 0
