"""Prompt lookup in the cost-aware rule: which source drafts a round, and how far.

With Q_j the probability that the first j copied tokens are all accepted (learned by
agreement, lookup_acceptance.py), copied token j pays exactly when

    Q_j  >  rho * (V(j + 1) - V(j))

(the model's rule with c = 0), so the copy ends at the first j where this fails. The draft
model carries on after m copied tokens when its expected gain G(m) beats the catch-up its
rejected copied tokens waste, and the plan "the model alone" wins when it is worth more
than the copy. The derivation and its assumptions: docs/adaptive.md ("Prompt lookup").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynaspec.core.round import DraftOptions, DraftPlan

if TYPE_CHECKING:
    from dynaspec.policies.adaptive import AdaptivePolicy


def plan_with_copy(
    policy: AdaptivePolicy, options: DraftOptions, remaining: int | None, alone: DraftPlan
) -> DraftPlan:
    """The sources of a round with a lookup match on offer; `alone` is the draft model's
    own plan (nothing without a draft model)."""
    rho = max(policy.rate, 1.0)
    probs = policy.lookup.prefix_probs(options.agreement, options.num_copy)
    copied = 0
    while copied < len(probs) and probs[copied] > rho * policy.verify_step(copied + 1):
        copied += 1
    copied, choice = policy.lookup.choose(copied)  # 1 now and then when it keeps declining
    if not copied:
        return DraftPlan(model=alone.model, probe=alone.probe, copy_choice=choice)
    expected = sum(probs[:copied])
    value = expected - rho * (policy.costs.verify_cost(copied + 1) - 1.0)
    carry = _carry_on_value(policy, probs[copied - 1], copied, options.catchup, expected, remaining)
    if alone.model and continuation_value(policy, 1.0, 0) > value + max(carry, 0.0):
        # the model alone is worth more than the copy
        return DraftPlan(model=alone.model, probe=alone.probe, copy_choice=choice)
    model = max(policy.config.max_tokens - copied, 0) if carry > 0.0 else 0  # 0: stands aside
    return DraftPlan(copied, model, copy_choice=choice, copy_accepted=probs[copied - 1])


def continuation_value(policy: AdaptivePolicy, prefix: float, offset: int) -> float:
    """G: the most the model's tokens after `offset` drafted ones (all accepted with
    probability `prefix`) are expected to gain over their cost, in tokens, before any
    confidence is seen (each accepted with the first-token acceptance)."""
    accept = policy.calibration.first_token_acceptance()
    cost, rho = policy.costs.draft_cost(), max(policy.rate, 1.0)
    best = total = 0.0
    for index in range(offset, policy.config.max_tokens):
        prefix *= accept
        total += prefix - rho * (cost + policy.verify_step(index + 1))
        best = max(best, total)
    return best


def _carry_on_value(
    policy: AdaptivePolicy,
    prefix: float,
    copied: int,
    catchup: int | None,
    expected: float,
    remaining: int | None,
) -> float:
    """G(m) - rho * (wasted catch-up), or 0 when the model cannot carry on."""
    if catchup is None or not policy.worth_starting(catchup, remaining):
        return 0.0
    feed = policy.costs.catchup_cost(copied + 1)  # the m copied tokens, in target steps
    if feed is None:
        return 0.0
    wasted = feed * (copied - expected) / copied
    return continuation_value(policy, prefix, copied) - max(policy.rate, 1.0) * wasted
