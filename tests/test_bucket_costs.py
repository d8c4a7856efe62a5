"""The cost model over buckets: a target whose forwards are padded to buckets (CUDA graphs,
backends/graphs.py) verifies 9 tokens for what 16 cost, and the adaptive rule must know it."""

from __future__ import annotations

import random

import pytest
from round_helpers import make_round

from dynaspec.core.config import SpecConfig
from dynaspec.core.round import DraftOptions, DraftStep
from dynaspec.policies import make_policy
from dynaspec.policies.adaptive import AdaptivePolicy
from dynaspec.policies.costs import CostModel

BUCKETS = (1, 2, 4, 8, 16, 32)
DRAFT_FORWARD_S = 0.02  # a draft token: 0.02 target steps


def test_a_verification_is_timed_and_priced_as_its_bucket() -> None:
    costs = CostModel(0.25, 0.05, window=32, min_prefill_tokens=16)
    costs.use_buckets(BUCKETS)
    for _ in range(3):
        costs.learn(make_round(0, 0, target_time_s=1.0))
        costs.learn(make_round(8, 3, target_time_s=2.0))  # 9 verified: the 16 bucket
        costs.learn(make_round(15, 3, target_time_s=2.0))
    assert set(costs.verify_times) == {1, 16}
    assert costs.verify_cost(9) == costs.verify_cost(12) == costs.verify_cost(16) == 2.0
    assert costs.verify_cost(3) == costs.verify_cost(4) <= costs.verify_cost(8) <= 2.0
    assert costs.width(9) == 16 and costs.width(40) == 40


def scripted_policy(seconds: dict[int, float]) -> AdaptivePolicy:
    """An adaptive policy whose cost model has timed every bucket `seconds` gives (the
    target's step: 1 s), with the calibration and the rate at their priors."""
    policy = AdaptivePolicy(max_tokens=20)
    policy.expect_buckets(BUCKETS)
    for _ in range(3):
        for width, time_s in seconds.items():
            drafted = width - 1
            policy.costs.learn(
                make_round(
                    drafted,
                    0,
                    target_time_s=time_s,
                    draft_time_s=DRAFT_FORWARD_S * drafted,
                    draft_forwards=drafted,
                )
            )
    return policy


def drafted_tokens(policy: AdaptivePolicy, confidences: list[float]) -> int:
    """Tokens the policy's plan and stopper let the draft propose with these confidences."""
    plan = policy.plan(DraftOptions(catchup=1), remaining=None)
    stopper = policy.stopper(plan)
    for index in range(plan.model):
        step = DraftStep(index=index, position=10 + index, token=0, confidence=confidences[index])
        if stopper.should_stop(step):
            return index + 1  # the token that stopped the draft is still verified
    return plan.model


# A GPU-like table: up to 8 tokens verify for one step; the 16 bucket costs 2.5 steps.
STEEP = {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 2.5, 32: 5.0}


@pytest.mark.parametrize("seed", range(6))
def test_the_policy_never_pays_a_bucket_more_for_no_expected_gain(seed: int) -> None:
    """Crossing from 8 to 9 tokens costs 1.5 steps for the ninth token, which can yield at
    most one: whatever the confidences, the rule stops within the 8 bucket."""
    rng = random.Random(seed)
    policy = scripted_policy(STEEP)
    assert policy.costs.verify_cost(9) == 2.5 and policy.costs.verify_cost(8) == 1.0
    confidences = [rng.uniform(0.5, 1.0) if seed else 0.999 for _ in range(20)]
    drafted = drafted_tokens(policy, confidences)
    assert drafted >= 1 and drafted + 1 <= 8
    if not seed:  # near-certain tokens: it fills the bucket it pays for
        assert drafted + 1 == 8


def test_where_the_next_bucket_costs_little_the_policy_drafts_past_it() -> None:
    """The same rule with a 16 bucket as cheap as the 8: the stop above was the bucket's."""
    flat = scripted_policy({**STEEP, 16: 1.05, 32: 1.1})
    assert drafted_tokens(flat, [0.999] * 20) + 1 > 8


def test_make_policy_hands_the_buckets_to_the_adaptive_cost_model_across_resets() -> None:
    policy = make_policy(SpecConfig(num_assistant_tokens_schedule="adaptive"), None, BUCKETS)
    assert isinstance(policy, AdaptivePolicy) and policy.costs.buckets == BUCKETS
    policy.reset()
    assert policy.costs.buckets == BUCKETS
    plain = make_policy(SpecConfig(num_assistant_tokens_schedule="adaptive"))
    assert plain.costs.buckets == ()
