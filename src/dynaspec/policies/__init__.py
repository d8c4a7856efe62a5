"""Lookahead policies: how far the draft sources draft in a round.

Every policy implements the same small protocol (`core.protocols.LookaheadPolicy`), so the
decoding loop never changes when a policy is added:

    reset()                  forget everything learned (called once per generate() unless
                             the caller passes its own policy object to carry state over)
    plan(options, remaining) before a round, from what the sources offer (a lookup match,
                             the draft model's catch-up): how many tokens to copy, then how
                             many the draft model may add (a frozen DraftPlan); remaining =
                             the most tokens the call can still emit
    stopper(plan)            the round's stop rule: after each drafted token, stop now?
    update(round)            learn from the finished round (the Round record)

A policy that only sets a lookahead subclasses `Schedule` (policies/base.py) and gets the
default plan (copy the whole match, then the model up to its lookahead) and stopper. A new
schedule name is one entry in `SCHEDULES` below.

A policy only changes how many tokens are drafted, never which tokens are accepted, so
every policy is exactly as lossless as the loop.
"""

from __future__ import annotations

from collections.abc import Callable

from dynaspec.core.config import SpecConfig
from dynaspec.core.protocols import LookaheadPolicy, Stopper
from dynaspec.core.round import DraftStep, Round
from dynaspec.errors import ConfigError
from dynaspec.policies.adaptive import AdaptiveConfig, AdaptivePolicy
from dynaspec.policies.base import Schedule
from dynaspec.policies.schedules import ConstantPolicy, DynamicPolicy, HeuristicPolicy, OraclePolicy

__all__ = [
    "SCHEDULES",
    "AdaptiveConfig",
    "AdaptivePolicy",
    "ConstantPolicy",
    "DraftStep",
    "DynamicPolicy",
    "HeuristicPolicy",
    "LookaheadPolicy",
    "OraclePolicy",
    "Round",
    "Schedule",
    "Stopper",
    "make_policy",
]

# `num_assistant_tokens_schedule` name -> a fresh policy configured from a SpecConfig.
# "heuristic_transient" is transformers' name for a heuristic that starts afresh every call,
# which is what every dynaspec policy does.
SCHEDULES: dict[str, Callable[[SpecConfig], LookaheadPolicy]] = {
    "dynamic": lambda c: DynamicPolicy(c.num_assistant_tokens, c.assistant_confidence_threshold),
    "heuristic": lambda c: HeuristicPolicy(c.num_assistant_tokens),
    "heuristic_transient": lambda c: HeuristicPolicy(c.num_assistant_tokens),
    "constant": lambda c: ConstantPolicy(c.num_assistant_tokens),
    "adaptive": lambda c: AdaptivePolicy(max_tokens=c.num_assistant_tokens),
}


def make_policy(
    config: SpecConfig, draft_cost: float | None = None, verify_buckets: tuple[int, ...] = ()
) -> LookaheadPolicy:
    """A fresh policy for the schedule `config` names, configured from `config`;
    `draft_cost`: what a draft token is expected to cost before it is timed, in target
    steps (the draft's weight bytes over the target's), for the policies that weigh it;
    `verify_buckets`: the widths the target pads its forwards to (each costs its own)."""
    schedule = config.num_assistant_tokens_schedule
    if schedule not in SCHEDULES:
        raise ConfigError(
            f"unknown num_assistant_tokens_schedule {schedule!r}; "
            f"choose one of {', '.join(SCHEDULES)}"
        )
    policy = SCHEDULES[schedule](config)
    if draft_cost is not None and isinstance(policy, AdaptivePolicy):
        policy.expect_draft_cost(draft_cost)
    if verify_buckets and isinstance(policy, AdaptivePolicy):
        policy.expect_buckets(verify_buckets)
    return policy
