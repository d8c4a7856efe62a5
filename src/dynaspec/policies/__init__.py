"""Lookahead policies: how many tokens the draft proposes in a round.

Every policy implements the same small protocol, so the decoding loop never changes when
a policy is added:

    reset()                 forget everything learned (called once per generate() unless
                            the caller passes its own policy object to carry state over)
    max_lookahead(catchup, remaining)
                            the most tokens to draft this round (0: no drafting at all);
                            catchup = tokens the draft must be fed before its first
                            proposal (1 when it is in step, more after rounds without
                            drafting, the whole prompt in the first round); remaining =
                            the most tokens the call can still emit (None: unknown)
    should_stop(step)       after drafting one token: stop drafting now? (the token is kept
                            and sent to the target for checking)
    update(result)          learn from the finished round

Optionally, `plan_sources(options, remaining)` (`core.protocols.SourcePlanner`) chooses the
sources of a round when prompt lookup is on: how many tokens to copy and how many the draft
model may add after them (the adaptive policy does, policies/source_plan.py).

A policy only changes how many tokens are drafted, never which tokens are accepted, so
every policy is exactly as lossless as the loop.
"""

from __future__ import annotations

from dynaspec.core.config import SpecConfig
from dynaspec.core.protocols import DraftStep, LookaheadPolicy, RoundResult
from dynaspec.errors import ConfigError
from dynaspec.policies.adaptive import AdaptivePolicy
from dynaspec.policies.schedules import ConstantPolicy, DynamicPolicy, HeuristicPolicy, OraclePolicy

__all__ = [
    "AdaptivePolicy",
    "ConstantPolicy",
    "DraftStep",
    "DynamicPolicy",
    "HeuristicPolicy",
    "LookaheadPolicy",
    "OraclePolicy",
    "RoundResult",
    "make_policy",
]


def make_policy(config: SpecConfig) -> LookaheadPolicy:
    """A fresh policy for a schedule name, configured from `config`."""
    schedule = config.num_assistant_tokens_schedule
    k = config.num_assistant_tokens
    if schedule == "constant":
        return ConstantPolicy(k)
    if schedule in ("heuristic", "heuristic_transient"):
        return HeuristicPolicy(k)
    if schedule == "dynamic":
        return DynamicPolicy(k, config.assistant_confidence_threshold)
    if schedule == "adaptive":
        return AdaptivePolicy(max_tokens=k)
    raise ConfigError(f"unknown num_assistant_tokens_schedule {schedule!r}")
