"""The adaptive policy's choice of draft sources (policies/source_plan.py) on hand-computed
cases: how many tokens to copy, whether the draft model carries on after a copy or stands
aside, when the model alone wins, and what is learned from a round with copied tokens."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from round_helpers import make_round

from dynaspec.core.round import DraftOptions, DraftPlan
from dynaspec.policies import AdaptivePolicy
from dynaspec.policies.adaptive import AdaptiveConfig
from dynaspec.policies.lookup_acceptance import LookupAcceptance, LookupPrior, agreement_bucket

# The arithmetic below is worked with one prior for every agreement: b = 0.8.
FLAT = LookupPrior(acceptance=(0.8,) * 7)


def flat_policy() -> AdaptivePolicy:
    return AdaptivePolicy(config=AdaptiveConfig(max_tokens=20, lookup=FLAT))


def measured(prefill_s_per_token: float, step_s: float = 0.2) -> AdaptivePolicy:
    """A policy that has timed the target's prefill (200 tokens) and one decoding step: the
    verification slope is then prefill_s_per_token / step_s target steps per token."""
    policy = flat_policy()
    policy.update(make_round(0, 0, (), 0.0, prefill_s_per_token * 200, 200))
    policy.update(make_round(0, 0, (), 0.0, step_s, 1))
    return policy


def offer(catchup: int | None, length: int, agreement: int) -> DraftOptions:
    """What the sources offer: a match of `length` tokens agreeing on `agreement`."""
    return DraftOptions(catchup, torch.zeros(length, dtype=torch.long), agreement)


def copy_only(length: int, agreement: int) -> DraftOptions:
    return offer(None, length, agreement)


def sources(plan: DraftPlan) -> tuple[int, int]:
    return plan.copy, plan.model


def test_agreement_buckets() -> None:
    assert [agreement_bucket(n) for n in (1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 500)] == [
        0, 1, 1, 2, 2, 3, 4, 4, 5, 5, 6, 6,
    ]  # fmt: skip


def test_fresh_policy_copies_while_the_prefix_pays() -> None:
    # Priors: b = 0.8 per copied token, V(n) = 1 + 0.05 (n - 1), rate 1: copy j pays while
    # 0.8^j > 0.05, i.e. up to j = 13: the whole 10-token continuation.
    assert sources(flat_policy().plan(copy_only(10, 2), None)) == (10, 0)


def test_expensive_verification_copies_less() -> None:
    policy = measured(prefill_s_per_token=0.1)  # 0.5 target steps per verified token
    assert policy.costs.verify_cost(2) == pytest.approx(1.5)
    # 0.8, 0.64, 0.512 > 0.5 > 0.8^4 = 0.41: three copied tokens.
    assert sources(policy.plan(copy_only(10, 2), None)) == (3, 0)


def test_a_long_copy_pays_as_a_whole_where_its_first_token_does_not() -> None:
    # Verifying 2 tokens costs 2 steps, each further one 0.05: copied token 1 (0.8) never
    # repays its own 1.0, the first 10 together (3.57) repay their 1.45.
    policy = measured(prefill_s_per_token=0.01)
    for verified in (3, 7, 11):
        policy.update(make_round(verified - 1, 0, (0.5,) * (verified - 1), 0.0,
                                 0.4 + 0.01 * (verified - 2), verified))  # fmt: skip
    assert policy.verify_step(1) == pytest.approx(1.0)
    assert policy.costs.verify_cost(11) == pytest.approx(2.45)
    assert sources(policy.plan(copy_only(10, 2), None)) == (10, 0)
    assert sources(policy.plan(copy_only(1, 2), None)) == (0, 0)


def test_learned_acceptance_by_agreement_and_probes() -> None:
    policy = measured(prefill_s_per_token=0.1)
    for _ in range(10):  # 1-token matches, the first copy always wrong; V(4) = 2.5 steps
        policy.update(make_round(3, 0, (1.0,) * 3, 0.0, 0.5, 4, num_copied=3, agreement=1))
    # Agreement 1 (bucket 0): (0 + 2 * 0.8) / (10 + 2); the second copied token would
    # agree on 2 (bucket 1, never observed): the prior.
    assert policy.lookup.acceptance(1, 0) == pytest.approx(1.6 / 12)
    assert policy.lookup.acceptance(1, 1) == pytest.approx(0.8)
    assert sources(policy.plan(copy_only(10, 8), None)) == (3, 0)  # other bucket
    # Declined 7 times, then a probe copies one token; the next probe waits 16 declines.
    plans = []
    for _ in range(8):
        plans.append(policy.plan(copy_only(10, 1), None))
        policy.lookup.prober.learn(plans[-1].copy_choice)  # what update() does
    assert [sources(plan) for plan in plans] == [(0, 0)] * 7 + [(1, 0)]
    assert [plan.copy_choice for plan in plans] == ["declined"] * 7 + ["probed"]
    assert policy.lookup.prober.interval == 16


def test_the_model_carries_on_after_a_copy_when_verification_is_cheap() -> None:
    # A GPU-like target: prefill 0.001 s per token against a 0.2 s step (slope 0.005).
    policy = measured(prefill_s_per_token=0.001)
    options = offer(1, 4, 4)
    # Copy all 4 (0.8^4 > 0.005); G(4) with Q_4 = 0.41, a = 0.8, c = 0.25: 0.08 > wasted
    # catch-up; the copy (2.34) + 0.08 beats the model alone (G(0) = 1.42).
    plan = policy.plan(options, 100)
    assert sources(plan) == (4, 16)
    assert policy.stopper(plan).prefix == pytest.approx(0.8**4)  # P_k starts at Q_4


def test_the_model_stands_aside_when_it_does_not_pay() -> None:
    policy = measured(prefill_s_per_token=0.001)
    for _ in range(5):  # a draft as slow as the target: 0.2 s per token
        policy.update(make_round(2, 1, (0.9, 0.9), 0.4, 0.2, 3, 2, 1))
    assert policy.costs.draft_cost() == pytest.approx(1.0)
    assert sources(policy.plan(offer(1, 4, 4), 100)) == (4, 0)
    assert policy.max_lookahead(1, 100) == 0  # and alone it would not draft either


def test_a_poor_copy_gives_way_to_the_model() -> None:
    policy = measured(prefill_s_per_token=0.001)
    for _ in range(20):  # 1-token matches accepted 3 times in 10
        for accepted in (1, 1, 1, 0, 0, 0, 0, 0, 0, 0):
            policy.lookup.learn(1, 1, accepted)
    assert sources(policy.plan(copy_only(1, 1), None)) == (1, 0)  # worth copying
    assert sources(policy.plan(offer(1, 1, 1), 100)) == (0, 20)  # but the model is worth more


def test_a_copy_on_offer_lets_a_draft_that_has_not_run_wait() -> None:
    # Prefill 0.01 s per token against a 0.2 s step: feeding the draft costs f * 0.05 =
    # 0.0125 steps per token, 3.74 steps for a draft 300 tokens behind.
    policy = measured(prefill_s_per_token=0.01)
    for _ in range(20):  # 1-token matches accepted 3 times in 10
        for accepted in (1, 1, 1, 0, 0, 0, 0, 0, 0, 0):
            policy.lookup.learn(1, 1, accepted)
    assert policy.costs.catchup_cost(300) == pytest.approx(3.7375)
    assert policy.max_lookahead(300, 1000) == 20  # without a match it would start
    # In step, or 300 behind after standing aside, the model alone (G(0) = 1.19) beats the
    # poor copy (0.3 - 0.05): its catch-up is due at its next round whatever this one does.
    for catchup in (1, 300):
        assert sources(policy.plan(offer(catchup, 1, 1), 1000)) == (0, 20)
    # Not run yet, its start (the prompt's prefill) is charged to the plan that starts it
    # now: 1.19 - 3.74 < the copy, which goes first and lets the start wait.
    fresh = DraftOptions(300, torch.zeros(1, dtype=torch.long), 1, started=False)
    assert sources(policy.plan(fresh, 1000)) == (1, 0)


def test_a_draft_starts_only_for_the_tokens_copies_do_not_give() -> None:
    # A draft 300 tokens behind costs 3.74 target steps to feed (above); 60 tokens left.
    policy = measured(prefill_s_per_token=0.01)
    cost = policy.costs.catchup_cost(300)
    assert policy.lookup.uncopied_share() == 1.0  # nothing copied: the draft gives all
    savings = 60 * (1 - 1 / policy.expected_rate())
    assert savings >= policy.config.start_margin * cost and policy.worth_starting(300, 60)
    # Four rounds of 20 copied tokens, all accepted: 21 tokens each, 1 not copied.
    for _ in range(4):
        policy.update(make_round(20, 20, (1.0,) * 20, 0.0, 0.3, 21, 0, 0, 20, agreement=8))
    # Each round weighed by 0.9 per round since, behind 4 tokens that copies did not give;
    # the two measuring steps of `measured` emitted one (not copied) token each.
    recent = sum(0.9**k for k in range(4))
    emitted = 21 * recent + (1 + 0.9) * 0.9**4
    share = (emitted - 20 * recent + 4) / (emitted + 4)
    assert policy.lookup.uncopied_share() == pytest.approx(share)  # 0.11
    assert policy.costs.catchup_cost(300) == cost  # the copies' rounds left it as it was
    savings = 60 * (1 - 1 / policy.expected_rate())  # counting all 60: it would start
    assert savings >= policy.config.start_margin * cost > share * savings
    assert not policy.worth_starting(300, 60)  # the copies will give most of the 60
    assert policy.worth_starting(2, 60)  # a draft in step is fed whatever copies give


def test_without_a_match_the_models_rule_is_unchanged() -> None:
    for catchup, remaining in ((1, None), (1, 3), (300, 10), (300, 10_000)):
        policy, twin = measured(0.01), measured(0.01)
        plan = policy.plan(DraftOptions(catchup), remaining)
        assert sources(plan) == (0, twin.max_lookahead(catchup, remaining))
    assert AdaptivePolicy().plan(DraftOptions(None), None) == DraftPlan()


def test_a_round_with_copied_tokens_teaches_both_sources_apart() -> None:
    policy = AdaptivePolicy()
    # 3 copied (all accepted) then 2 model tokens at confidence 0.95 (the first accepted).
    confidences = (1.0, 1.0, 1.0, 0.95, 0.95)
    policy.update(make_round(5, 4, confidences, 0.05, 0.3, 6, 2, 4, 3, agreement=2))
    assert policy.lookup.total == [0, 2, 1, 0, 0, 0, 0]  # agreements 2, 3 and 4
    assert sum(policy.lookup.accepted) == 3.0
    calibration = policy.calibration
    assert calibration.bin_total[9] == 2 and calibration.bin_accepted[9] == 1  # model only
    assert (calibration.first_total, calibration.first_accepted) == (1, 1)
    assert policy.prober.waited == 0
    # A copy rejected at its second token: the model's tokens were never judged.
    policy.update(make_round(5, 1, (1.0,) * 5, 0.05, 0.3, 6, 2, 4, 3, agreement=2))
    assert policy.lookup.total[1] == 4.0 and policy.lookup.accepted[1] == 3.0  # 2 and 3
    assert calibration.bin_total[9] == 2 and calibration.first_total == 1
    # A round of copied tokens only: the draft model did not draft.
    policy.update(make_round(2, 2, (1.0, 1.0), 0.0, 0.3, 3, 0, 0, 2, agreement=2))
    assert policy.prober.waited == 1


def test_lookup_acceptance_counts_known_outcomes_only() -> None:
    table = LookupAcceptance()
    table.learn(agreement=5, num_copied=4, num_accepted=1)  # 2nd rejected, 3rd/4th unknown
    assert table.total == [0, 0, 2, 0, 0, 0, 0]  # agreements 5 and 6
    assert table.accepted == [0, 0, 1, 0, 0, 0, 0]
    table.learn(agreement=6, num_copied=3, num_accepted=6)  # copies and model all accepted
    assert table.total == [0, 0, 4, 1, 0, 0, 0] and table.accepted == [0, 0, 3, 1, 0, 0, 0]
    assert table.prefix_probs(5, 2)[1] == pytest.approx(
        table.acceptance(5, 0) * table.acceptance(5, 1)
    )


def test_a_copy_that_runs_on_is_trusted_more() -> None:
    table = LookupAcceptance(FLAT)
    for _ in range(20):  # 2-token matches: the first copied token right 1 time in 4
        for accepted in (1, 0, 0, 0):
            table.learn(agreement=2, num_copied=1, num_accepted=accepted)
    for _ in range(20):  # long agreements: always right
        table.learn(agreement=32, num_copied=4, num_accepted=4)
    rates = table.rates()
    # Agreement 1 (never seen, prior 0.8) is pooled with 2-3 (learned 0.26): out of order.
    assert rates[:2] == [pytest.approx((1.6 + 20 + 1.6) / 84)] * 2
    # 4-31 unexplored: the prior; 64+ unexplored is pooled with 32-63 (always right).
    assert rates[2:5] == [pytest.approx(0.8)] * 3
    assert rates[5:] == [pytest.approx((80 + 1.6 + 1.6) / 84)] * 2
    assert table.acceptance(2, 30) == rates[5]  # 2 + 30 = 32 tokens of agreement


def test_long_buckets_borrow_the_drafts_continuation_rate_until_observed() -> None:
    table = LookupAcceptance()
    assert table.rates(borrowed=0.97) == pytest.approx([0.25, 0.45, 0.75] + [0.97] * 4)
    assert table.rates(borrowed=0.5) == table.rates()  # never below the prior
    for _ in range(8):  # 32-token agreements seen to fail: their own evidence outweighs
        table.learn(agreement=32, num_copied=2, num_accepted=0)
    # 32-63 (1.94 / 10) pooled with the unexplored 4-7, 8-15 and 16-31 above it: 7.32 / 16.
    assert table.rates(borrowed=0.97)[2:6] == [pytest.approx(2 * (0.75 + 3 * 0.97) / 16)] * 4


def test_a_long_match_is_trusted_as_much_as_a_running_draft() -> None:
    # HumanEval/82 (a type-hints edit): the draft has run 16 of 16 three times (a_c 0.99),
    # worth 7.8 tokens a round; a 32-token agreement's copy on its prior of 0.9 a token
    # (7.3 over 16) lost to it every round, untried, so its bucket never learned.
    def trained(borrow_from: int) -> AdaptivePolicy:
        prior = LookupPrior(borrow_from=borrow_from)
        policy = AdaptivePolicy(config=AdaptiveConfig(max_tokens=20, lookup=prior))
        policy.update(make_round(0, 0, (), 0.0, 2.0, 200))  # a 200-token prefill
        for _ in range(3):
            policy.update(make_round(16, 16, (0.9,) * 16, 0.8, 0.36, draft_forwards=16))
        return policy

    policy = trained(borrow_from=8)
    assert policy.calibration.continuation_acceptance() == pytest.approx((45 + 1.6) / 47)
    assert sources(policy.plan(offer(1, 16, 32), 500)) == (16, 4)  # the copy, then the model
    assert sources(trained(borrow_from=10**6).plan(offer(1, 16, 32), 500)) == (0, 20)


def test_the_default_prior_trusts_short_agreements_less() -> None:
    # A fresh policy with the default prior (b = 0.25 at agreement 1, 0.45 at 2-3, 0.75 at
    # 4-7, 0.9 from 8): a 1-token match's copy pays for 2 tokens (0.25, 0.11 > 0.05 >
    # 0.05 - ...), a long agreement's for all 10 (0.9^10 = 0.35 > 0.05).
    policy = AdaptivePolicy()
    assert policy.lookup.prefix_probs(1, 3) == pytest.approx([0.25, 0.1125, 0.050625])
    assert sources(policy.plan(copy_only(10, 1), None))[0] < 4
    assert sources(policy.plan(copy_only(10, 8), None)) == (10, 0)
    # Against a draft model, a 1-token match gives way; a flat 0.8 prior copied it.
    assert sources(AdaptivePolicy().plan(offer(1, 10, 1), 100)) == (0, 20)
    assert sources(flat_policy().plan(offer(1, 10, 1), 100))[0] > 0


@given(
    rounds=st.lists(
        st.tuples(st.integers(1, 40), st.integers(1, 32), st.integers(0, 40)), max_size=40
    )
)
def test_learned_rates_are_probabilities_that_never_fall_with_agreement(
    rounds: list[tuple[int, int, int]],
) -> None:
    table = LookupAcceptance()
    for match, copied, accepted in rounds:
        table.learn(match, copied, accepted)
    rates = table.rates()
    assert len(rates) == len(table.total)
    assert all(0.0 < rate <= 1.0 for rate in rates)
    assert all(low <= high + 1e-12 for low, high in zip(rates, rates[1:], strict=False))
    # Pooling keeps the evidence: weighted by observations + prior weight, the mean is kept.
    weights = [total + table.prior.weight for total in table.total]
    kept = sum(rate * weight for rate, weight in zip(rates, weights, strict=True))
    hits = sum(table.accepted) + table.prior.weight * sum(table.prior.acceptance)
    assert kept == pytest.approx(hits)
