"""The policies the oracle analysis replays, under the method names its tables show: the
same settings as `dynaspec bench`'s methods of those names."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dynaspec.core.config import SpecConfig
from dynaspec.eval.oracle.records import ORACLE
from dynaspec.policies import LookaheadPolicy, OraclePolicy, make_policy

STATIC_LOOKAHEADS: tuple[int, ...] = tuple(range(1, 11))  # constant-k policies compared
DYNAMIC_THRESHOLDS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DYNAMIC_MAX_TOKENS = 20  # num_assistant_tokens of the dynamic and adaptive policies
HEURISTIC_START = 5  # num_assistant_tokens the heuristic starts from (as in dynaspec bench)
ORACLE_MAX_TOKENS = 64  # OraclePolicy's cap on one round's draft

PolicyFactory = Callable[[Sequence[int]], LookaheadPolicy]  # full reference -> fresh policy


@dataclass(frozen=True)
class PolicySpec:
    """A policy the replay runs, under the method name the tables show."""

    name: str  # e.g. "constant-5", "dynamic-0.4", "heuristic", "adaptive", "oracle"
    make: PolicyFactory  # builds a fresh policy from the reference token sequence


def constant_name(lookahead: int) -> str:
    return f"constant-{lookahead}"


def dynamic_name(threshold: float) -> str:
    return f"dynamic-{threshold:g}"


def default_policy_specs(
    static: Sequence[int] = STATIC_LOOKAHEADS,
    thresholds: Sequence[float] = DYNAMIC_THRESHOLDS,
    *,
    include_adaptive: bool = True,
) -> list[PolicySpec]:
    """oracle, constant-k for k in `static`, dynamic-t for t in `thresholds` (at most 20
    tokens), heuristic (start 5, +2/-1) and, with `include_adaptive`, adaptive (at most 20
    tokens): the same settings as `dynaspec bench`'s methods of those names."""

    def constant(k: int) -> PolicySpec:
        spec = SpecConfig(num_assistant_tokens=k, num_assistant_tokens_schedule="constant")
        return PolicySpec(constant_name(k), lambda _ref: make_policy(spec))

    def dynamic(threshold: float) -> PolicySpec:
        spec = SpecConfig(
            num_assistant_tokens=DYNAMIC_MAX_TOKENS,
            assistant_confidence_threshold=threshold,
            num_assistant_tokens_schedule="dynamic",
        )
        return PolicySpec(dynamic_name(threshold), lambda _ref: make_policy(spec))

    def named(schedule: str, num_assistant_tokens: int) -> PolicySpec:
        spec = SpecConfig(
            num_assistant_tokens=num_assistant_tokens, num_assistant_tokens_schedule=schedule
        )
        return PolicySpec(schedule, lambda _ref: make_policy(spec))

    specs = [PolicySpec(ORACLE, lambda ref: OraclePolicy(ref, max_tokens=ORACLE_MAX_TOKENS))]
    specs += [constant(k) for k in static]
    specs += [dynamic(t) for t in thresholds]
    specs.append(named("heuristic", HEURISTIC_START))
    if include_adaptive:
        specs.append(named("adaptive", DYNAMIC_MAX_TOKENS))
    return specs
