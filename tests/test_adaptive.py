"""The cost-aware adaptive policy: its rule on hand-computed cases, what it learns, and that
it adapts its lookahead to what drafting costs."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from round_helpers import make_round
from tiny_models import ScriptedModel

import dynaspec
from dynaspec import GenerateOutput
from dynaspec.core.round import DraftOptions, DraftPlan, Round
from dynaspec.eval.cost_model import CostProfile
from dynaspec.eval.oracle.replay import SimulatedTimePolicy
from dynaspec.policies import DraftStep
from dynaspec.policies.adaptive import AdaptivePolicy
from dynaspec.policies.isotonic import pool_adjacent_violators


def step(index: int, confidence: float) -> DraftStep:
    return DraftStep(index=index, position=10 + index, token=1, confidence=confidence)


def result(drafted: int, accepted: int, *, draft_s: float, target_s: float, conf: float = 0.9):
    return make_round(
        drafted,
        accepted,
        (conf,) * drafted,
        draft_time_s=draft_s * drafted,
        target_time_s=target_s,
        draft_forwards=drafted,
        catchup=1,
    )


def test_fresh_policy_rule_by_hand() -> None:
    # Priors: c = 0.25, V(n) = 1 + 0.05 (n - 1), rate 1, calibration = identity behind a
    # prior weight of 2, first-token acceptance prior 0.8.
    policy = AdaptivePolicy(max_tokens=20)
    assert policy.threshold(0) == pytest.approx(0.25 + 0.05)
    assert policy.max_lookahead() == 20  # a_1 = 0.8 > 0.30
    stopper = policy.stopper(DraftPlan(model=20))
    # Token 1 at confidence 0.95 -> bin 9, calibrated 0.95; prefix 0.95; next gain
    # 0.95 * 0.95 = 0.9025 > 0.30: continue.
    assert stopper.should_stop(step(0, 0.95)) is False
    # Token 2 at 0.5 -> bin 5, calibrated 0.55; prefix 0.5225; gain 0.287 < 0.30: stop.
    assert stopper.should_stop(step(1, 0.5)) is True
    assert stopper.reason == "cost"


def test_calibration_learns_from_outcomes() -> None:
    policy = AdaptivePolicy()
    # Ten rounds: 3 drafted at confidence 0.95, the first accepted, the second rejected.
    for _ in range(10):
        policy.update(result(3, 1, draft_s=0.01, target_s=0.1, conf=0.95))
    # Bin 9 saw 20 known outcomes (10 accepted, 10 rejected; the third token is unknown):
    # (10 + 2 * 0.95) / (20 + 2) = 0.541, below the priors of bins 6-8 (0.65, 0.75, 0.85,
    # weight 2 each), so monotone pooling merges bins 6-9: (2 * 2.25 + 11.9) / 28.
    assert policy.calibration.acceptance(0.95) == pytest.approx(16.4 / 28)
    assert policy.calibration.acceptance(0.65) == pytest.approx(16.4 / 28)
    assert policy.calibration.acceptance(0.55) == pytest.approx(0.55)
    assert policy.calibration.first_token_acceptance() == pytest.approx((10 + 1.6) / 12)
    # Each round's second token came after an accepted one and was rejected: 0 of 10.
    assert policy.calibration.continuation_acceptance() == pytest.approx(1.6 / 12)


def test_a_draft_that_stumbles_on_its_first_token_keeps_its_worth() -> None:
    # Two rounds of one rejected token, then a round of 14 accepted in a row (lee/290, a
    # quote summary): the first tokens alike in both policies, the tokens after them not.
    def trained(then_accepted: int) -> AdaptivePolicy:
        policy = AdaptivePolicy(max_tokens=20)
        for _ in range(2):
            policy.update(result(1, 0, draft_s=0.02, target_s=0.17))
        policy.update(result(14, then_accepted, draft_s=0.02, target_s=0.25))
        return policy

    runs, stops = trained(then_accepted=14), trained(then_accepted=1)
    first = runs.calibration.first_token_acceptance()
    assert first == stops.calibration.first_token_acceptance() == pytest.approx(2.6 / 5)
    assert runs.calibration.continuation_acceptance() == pytest.approx((13 + 1.6) / 15)
    assert runs.model_value() > stops.model_value() > 0.0


def test_pool_adjacent_violators_is_monotone() -> None:
    assert pool_adjacent_violators([0.1, 0.5, 0.3, 0.9], [1, 1, 1, 1]) == pytest.approx(
        [0.1, 0.4, 0.4, 0.9]
    )
    # Sums and weights: means 0.5 (weight 3) and 0.2 (weight 1) pool to 1.7 / 4.
    assert pool_adjacent_violators([1.5, 0.2], [3, 1]) == pytest.approx([0.425, 0.425])


def test_costs_are_measured_in_target_steps() -> None:
    policy = AdaptivePolicy()
    for drafted in (1, 3, 5, 1, 3, 5):
        # Target: 0.2 s + 0.01 s per extra verified token; draft 0.05 s per token.
        policy.update(result(drafted, drafted, draft_s=0.05, target_s=0.2 + 0.01 * drafted))
    assert policy.costs.verify_cost(1) == pytest.approx(1.0)
    assert policy.costs.verify_cost(6) == pytest.approx(1.25)
    assert policy.costs.draft_cost() == pytest.approx(0.25)


# Measured on the AVX2 EPYC in float32, eager (transformers' cache), the README example's
# 15 rounds: one target step over 1 token 0.75 s, over 3 to 21 tokens 2.0-3.3 s, a draft
# token 0.23-0.27 s (tests/test_adaptive.py cites them; docs/design/adaptive.md, "Estimates").
EAGER_AVX2 = [(1, 0.749), (6, 2.407), (4, 2.022), (3, 2.003), (21, 2.674), (8, 2.189),
              (21, 2.125), (21, 2.586), (16, 2.468), (6, 2.657), (18, 2.78), (12, 2.1),
              (9, 2.463), (20, 3.317)]  # fmt: skip


def test_a_step_in_the_verification_cost_is_not_taken_for_a_dear_target_step() -> None:
    # A line through all of them put V(1) at 1.77 s: the draft looked 2.4x cheaper than it
    # is, the target alone 2.4x slower, and the policy drafted every round at 0.8x.
    policy = AdaptivePolicy(max_tokens=20)
    for verified, target_s in EAGER_AVX2:
        drafted = verified - 1
        policy.update(
            make_round(drafted, drafted // 2, (0.9,) * drafted, 0.24 * drafted, target_s,
                       draft_forwards=drafted, catchup=1)
        )  # fmt: skip
    assert policy.costs.step_time() == pytest.approx(0.749)
    assert policy.costs.draft_cost() == pytest.approx(0.24 / 0.749)
    assert 2.6 < policy.costs.verify_cost(2) < 3.0  # the step: over 2 tokens, 2.7 steps
    assert policy.costs.verify_cost(21) - policy.costs.verify_cost(2) < 1.0  # then flat
    # With its first token accepted 4 times in 5, no lookahead repays 2.7 steps and 0.32 a
    # token: the target alone is faster.
    policy.calibration.first_accepted, policy.calibration.first_total = 8.0, 10.0
    assert policy.model_value() == 0.0 and policy.max_lookahead() == 0


def test_two_noisy_wide_forwards_are_fitted_through_the_timed_step() -> None:
    # Logged at batch 4 (AVX512-BF16, bf16): steps of 0.17 s, then forwards over 13 and 17
    # tokens of 0.22 and 0.30 s. The line through those two reaches n = 1 below 0; its old
    # fallback (the points' mean at n = 1) made verifying 2 tokens cost 1.65 steps, and
    # the rule never drafted again. Through the timed step: about 0.006 steps a token.
    policy = AdaptivePolicy(max_tokens=20)
    for seconds in (0.17, 0.1675, 0.1702):
        policy.update(make_round(0, 0, (), 0.0, seconds, 1))
    policy.update(make_round(12, 9, (0.9,) * 12, 0.4, 0.22, draft_forwards=12, catchup=1))
    policy.update(make_round(16, 8, (0.9,) * 16, 0.5, 0.30, draft_forwards=16, catchup=1))
    assert policy.costs.verify_cost(2) == pytest.approx(1.0, abs=0.05)
    assert policy.costs.verify_cost(17) == pytest.approx(0.30 / 0.17, rel=0.1)


def test_a_long_draft_may_pay_where_its_first_token_alone_does_not() -> None:
    # Verifying 2 tokens costs 2 steps, each further token 0.01: the first drafted token
    # (gain 0.9) never repays the step, ten of them at 0.9 each do (gain 5.9 > 10 x 0.05
    # + 1.1).
    policy = AdaptivePolicy(max_tokens=10)
    policy.update(make_round(0, 0, (), 0.0, 0.2, 1))
    for drafted in (1, 5, 9):
        policy.update(
            make_round(drafted, drafted, (0.9,) * drafted, 0.01 * drafted,
                       0.4 + 0.002 * (drafted - 1), draft_forwards=drafted, catchup=1)
        )  # fmt: skip
    policy.calibration.first_accepted, policy.calibration.first_total = 9.0, 10.0
    assert policy.threshold(0) > 0.9  # token by token the draft never starts ...
    assert policy.model_value() > 0.0 and policy.max_lookahead() == 10  # ... as a whole it does


def count_drafted(policy: AdaptivePolicy, confidence: float = 0.9) -> int:
    """Tokens the policy drafts in one round where every token has `confidence`."""
    limit = policy.max_lookahead()
    stopper = policy.stopper(DraftPlan(model=limit))
    for index in range(limit):
        if stopper.should_stop(step(index, confidence)):
            return index + 1
    return limit


def trained(draft_s: float) -> AdaptivePolicy:
    policy = AdaptivePolicy()
    for _ in range(20):
        policy.update(result(4, 3, draft_s=draft_s, target_s=0.2))
    return policy


def test_cheap_draft_drafts_longer_than_expensive() -> None:
    cheap, pricey = trained(draft_s=0.01), trained(draft_s=0.08)
    assert count_drafted(cheap) > count_drafted(pricey) >= 1


def test_draft_that_costs_more_than_it_saves_is_not_used() -> None:
    policy = trained(draft_s=0.3)  # a draft token costs 1.5 target steps
    assert policy.max_lookahead() == 0
    # ... but a probe round comes back after `probe_interval` rounds without drafting.
    for _ in range(policy.config.probe_interval):
        policy.update(make_round(0, 0, (), 0.0, 0.2, 1))
    assert policy.max_lookahead() == 1


def test_probes_back_off_and_skip_expensive_catchups() -> None:
    policy = trained(draft_s=0.3)
    interval = policy.prober.interval
    policy.prober.waited = interval
    # A draft 1000 tokens behind would cost far more than a target step to catch up.
    assert policy.max_lookahead(catchup=1000) == 0
    plan = policy.model_plan(catchup=1)  # in step: no catch-up to pay
    assert plan == DraftPlan(model=1, probe=True)
    probe = make_round(1, 1, (0.9,), 0.3, 0.2, draft_forwards=1, catchup=1, plan=plan)
    policy.update(probe)
    assert policy.prober.interval == 2 * interval and policy.prober.waited == 0
    assert policy.max_lookahead() == 0  # still not worth drafting, next probe later


def test_a_probe_may_pay_a_catchup_within_its_share_of_the_tokens_left() -> None:
    # A dear draft falls further behind with every round it does not draft; a probe whose
    # catch-up fits in probe_budget (2%) of the tokens left still judges it again (measured
    # without this, on an open-ended prompt with the w4a8 target: the hybrid's draft model
    # stood aside for 92 of 100 rounds while the draft alone had 113 of 115 tokens accepted).
    policy = trained(draft_s=0.3)  # 1.5 steps a draft token
    policy.prober.waited = policy.prober.interval
    assert policy.costs.catchup_cost(3) > 2 * policy.config.max_probe_catchup
    assert policy.model_plan(catchup=3, remaining=1000) == DraftPlan(model=1, probe=True)
    assert policy.model_plan(catchup=3, remaining=100) == DraftPlan()  # 2% of 100: 2 steps


def test_cold_policy_weighs_the_drafts_catchup_against_the_tokens_left() -> None:
    policy = AdaptivePolicy(max_tokens=20)
    # Nothing timed yet: the first round (the prompt's prefill) is a plain target step.
    assert policy.max_lookahead(catchup=200, remaining=1000) == 0
    policy.update(make_round(0, 0, (), 0.0, 2.0, 200))  # prefill: 0.01 s per token
    assert policy.max_lookahead(catchup=201, remaining=1000) == 0  # no target step timed yet
    policy.update(make_round(0, 0, (), 0.0, 0.2, 1))  # one step: 0.2 s
    # Until several tokens are verified, the prefill gives the slope: 0.01 s = 0.05 steps.
    assert policy.costs.verify_cost(6) == pytest.approx(1.25)
    # Catch-up of 201 extra tokens at c (prior 0.25) x 0.01 s / 0.2 s = 0.0125 steps each.
    assert policy.costs.catchup_cost(202) == pytest.approx(2.5125)
    # a = 0.8 (prior), c = 0.25, V(n) = 1 + 0.05 (n - 1): k = 3 is best, 2.952 / 1.9.
    assert policy.expected_rate() == pytest.approx(2.952 / 1.9)
    # Savings R (1 - 1.9 / 2.952) against 2 x 2.5125: 3.56 for R = 10, 7.13 for R = 20.
    assert policy.max_lookahead(catchup=202, remaining=10) == 0
    assert policy.max_lookahead(catchup=202, remaining=20) == 20
    assert policy.max_lookahead(catchup=1, remaining=3) == 20  # in step: nothing to repay


def test_expensive_prefill_means_expensive_verification() -> None:
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 20.0, 200))  # 0.1 s per prompt token
    policy.update(make_round(0, 0, (), 0.0, 0.2, 1))
    # Slope 0.5 steps per verified token: k = 1 is best, 1.8 / (0.25 + 1.5).
    assert policy.expected_rate() == pytest.approx(1.8 / 1.75)
    # Catch-up 201 x 0.25 x 0.5 = 25.1 steps; even 1000 tokens save only 1000 x 0.028.
    assert policy.max_lookahead(catchup=202, remaining=1000) == 0


def fixed_costs(
    *, target_s: float, draft_s: float, target_per_token_s: float = 0.0
) -> SimulatedTimePolicy:
    """A fresh adaptive policy that learns round times from a cost model, not the clock.

    The loop times every forward and hands the times to the policy; the wrapper (the
    oracle's replay uses it too) replaces them with what the round's counts cost: a target
    forward over n tokens `target_s + target_per_token_s * n`, a draft forward `draft_s`.
    The policy's rule is unchanged, but what it sees no longer depends on how loaded the
    machine is, so its decisions are the same on every run (the stats keep the real times).
    """
    verify_s = (target_s + target_per_token_s, target_s + 2 * target_per_token_s)
    profile = CostProfile(draft_token_s=draft_s, verify_s=verify_s)  # T(n) linear in n
    return SimulatedTimePolicy(AdaptivePolicy(max_tokens=20), profile)


def counting_model() -> ScriptedModel:
    return ScriptedModel.greedy(lambda prefix: (prefix[-1] + 1) % 16, 16, confidence=0.95)


def adaptive_run(prompt: torch.Tensor, max_new_tokens: int, **costs: float) -> GenerateOutput:
    """An adaptive run of two always-agreeing counting models, timed by `costs`."""
    policy = fixed_costs(**costs)
    return dynaspec.generate(
        counting_model(), counting_model(), prompt, max_new_tokens=max_new_tokens, policy=policy
    )


def test_the_cost_model_replaces_the_clock() -> None:
    """Two runs with the same costs take the same rounds, however long the forwards took."""
    runs = [adaptive_run(torch.tensor([[0]]), 40, target_s=0.03, draft_s=0.001) for _ in "ab"]
    assert [r.num_drafted for r in runs[0].stats.rounds] == [
        r.num_drafted for r in runs[1].stats.rounds
    ]


def test_expensive_prefill_before_a_short_generation_never_starts_the_draft() -> None:
    prompt = torch.tensor([[i % 16 for i in range(40)]])
    # Target: 10 ms per forward + 4 ms per token, so its 40-token prefill costs ~12 steps
    # and each extra verified token ~0.3 steps; a draft forward costs 1 ms.
    costs = {"target_s": 0.01, "target_per_token_s": 0.004, "draft_s": 0.001}
    alone = dynaspec.generate(counting_model(), None, prompt, max_new_tokens=200)
    runs = {new_tokens: adaptive_run(prompt, new_tokens, **costs) for new_tokens in (20, 200)}
    for new_tokens, run in runs.items():
        assert torch.equal(run.sequences, alone.sequences[:, : prompt.shape[1] + new_tokens])
    # Catch-up ~ 0.25 x 41 x 0.3 = 3.1 steps; expected rate ~1.16, savings ~0.14 per token.
    # 20 tokens: 18 left after the two measuring steps, savings 2.5 < 2 x 3.1: never drafts.
    assert [r.num_drafted for r in runs[20].stats.rounds] == [0] * 20
    # 200 tokens: 198 left, savings ~27: drafting starts in the third round.
    drafted = [r.num_drafted for r in runs[200].stats.rounds]
    assert drafted[:2] == [0, 0] and drafted[2] > 0


def test_adaptive_uses_a_cheap_draft_and_skips_an_expensive_one() -> None:
    # The draft always agrees. Cheap draft (1 ms vs a 30 ms target): long drafts pay.
    # Draft as slow as the target (40 ms): drafting never pays, so rounds become plain steps.
    prompt = torch.tensor([[0]])
    cheap = adaptive_run(prompt, 40, target_s=0.03, draft_s=0.001)
    pricey = adaptive_run(prompt, 40, target_s=0.03, draft_s=0.04)
    assert torch.equal(cheap.sequences, pricey.sequences)  # lossless either way
    cheap_drafted = [r.num_drafted for r in cheap.stats.rounds]
    pricey_drafted = [r.num_drafted for r in pricey.stats.rounds]
    assert max(cheap_drafted) >= 5
    # After the first rounds measured the cost, the expensive draft is (almost) never used.
    assert sum(pricey_drafted[3:]) <= 3
    assert sum(cheap_drafted) > sum(pricey_drafted)


def test_caller_policy_keeps_what_it_learned() -> None:
    policy = fixed_costs(target_s=0.03, draft_s=0.001)  # a cheap draft: it drafts
    model = counting_model()
    dynaspec.generate(
        model, counting_model(), torch.tensor([[0]]), max_new_tokens=20, policy=policy
    )
    learned = sum(policy.inner.calibration.bin_total)
    assert learned > 0
    dynaspec.generate(
        model, counting_model(), torch.tensor([[0]]), max_new_tokens=20, policy=policy
    )
    assert sum(policy.inner.calibration.bin_total) > learned


def test_a_cold_short_prefill_does_not_set_the_verification_slope() -> None:
    # The README's example: a 4-token prompt, the process's first forward 10x slower than
    # a steady one (0.27 s): 0.675 s per prompt token, 2.7 steps. Taken as the cost of
    # each verified token, that kept every first drafted token from paying, for good.
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 2.7, 4))
    policy.update(make_round(0, 0, (), 0.0, 0.25, 1))
    # Under 16 tokens a prefill is mostly the forward's fixed cost: the prior slope stays.
    assert policy.costs.verify_cost(2) == pytest.approx(1.05)
    # Its catch-up costs at most c per token (a forward over m tokens costs at most m
    # forwards over one): 5 extra tokens x 0.25 steps.
    assert policy.costs.catchup_cost(6) == pytest.approx(1.25)
    assert policy.max_lookahead(catchup=6, remaining=126) == 20


def test_a_cold_long_prefill_costs_at_most_a_step_per_token() -> None:
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 40 * 2.5, 40))  # 10x a 0.25 s step per token
    policy.update(make_round(0, 0, (), 0.0, 0.25, 1))
    # Verifying n tokens in one forward costs at most n steps: V(2) <= 2.
    assert policy.costs.verify_cost(2) == pytest.approx(2.0)
    assert policy.costs.catchup_cost(11) == pytest.approx(10 * 0.25)  # at most c per token


class ColdStart:
    """Wraps a policy: the first forward of each model took `factor` times as long as the
    times handed in (allocation, kernel set-up: a cost that does not repeat)."""

    def __init__(self, inner: AdaptivePolicy, factor: float) -> None:
        self.inner, self.factor, self.name = inner, factor, inner.name
        self.target_cold = self.draft_cold = True

    def reset(self) -> None:
        self.inner.reset()

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        return self.inner.plan(options, remaining)

    def stopper(self, plan: DraftPlan):
        return self.inner.stopper(plan)

    def update(self, round: Round) -> None:
        target_s, draft_s = round.target_time_s, round.draft_time_s
        if self.target_cold:
            target_s, self.target_cold = target_s * self.factor, False
        if round.draft_forwards and self.draft_cold:
            draft_s += (self.factor - 1) * draft_s / round.draft_forwards
            self.draft_cold = False
        self.inner.update(dataclasses.replace(round, target_time_s=target_s, draft_time_s=draft_s))


def cold_run(prompt_length: int, max_new_tokens: int) -> GenerateOutput:
    """Two agreeing counting models timed as a 1.5B/0.5B pair on a CPU (0.25 s a target
    step + 8 ms per extra token, 60 ms a draft forward; a prefill is a forward over the
    prompt), the first forward of each 10x slower than the steady state."""
    profile = CostProfile(draft_token_s=0.06, verify_s=(0.25, 0.258))
    policy = SimulatedTimePolicy(ColdStart(AdaptivePolicy(max_tokens=20), 10.0), profile)
    prompt = torch.tensor([[i % 16 for i in range(prompt_length)]])
    return dynaspec.generate(
        counting_model(), counting_model(), prompt, max_new_tokens=max_new_tokens, policy=policy
    )


@pytest.mark.parametrize("prompt_length", [1, 3, 4, 12])
def test_drafting_starts_after_a_cold_first_forward(prompt_length: int) -> None:
    run = cold_run(prompt_length, 128)
    prompt = run.sequences[:, :prompt_length]
    alone = dynaspec.generate(counting_model(), None, prompt, max_new_tokens=128)
    assert torch.equal(run.sequences, alone.sequences)
    drafted = [r.num_drafted for r in run.stats.rounds]
    # The prompt is fed to the draft at once (1-2 tokens) or after the two measuring steps.
    assert drafted.index(next(d for d in drafted if d)) <= 2
    assert sum(drafted) >= 100


def test_a_probe_checks_a_cold_long_prefill_when_many_tokens_are_left() -> None:
    # 40 prompt tokens at 10x: the slope looks like 0.56 steps per token and the draft is
    # not started; with 1000 tokens left, a probe's catch-up (~6.6 steps) is within 2% of
    # them, the probe times a forward over 2 tokens, and the measured slope takes over.
    drafted = [r.num_drafted for r in cold_run(40, 1000).stats.rounds]
    assert drafted[:8] == [0] * 8 and drafted[8] == 1  # the probe
    assert sum(drafted) >= 900
    short = [r.num_drafted for r in cold_run(40, 128).stats.rounds]
    assert sum(short) == 0  # 128 tokens: the probe would cost more than 2% of them


def through_text(forwards: int, proposed: int, accepted: int) -> Round:
    """A round of a draft with another tokenizer: `forwards` draft tokens of 0.1 s each
    gave `proposed` target tokens; the target's forward over them took 1 s."""
    return make_round(
        proposed,
        accepted,
        (0.9,) * proposed,
        draft_time_s=0.1 * forwards,
        target_time_s=1.0,
        draft_forwards=forwards,
        catchup=1,
    )


def test_a_draft_is_priced_per_target_token_it_proposes() -> None:
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 1.0, 1))  # a target step: 1 s
    for _ in range(3):  # 10 draft tokens re-encode to 5 target tokens
        policy.update(through_text(forwards=10, proposed=5, accepted=5))
    assert policy.costs.forward_cost() == pytest.approx(0.1)
    yield_ = (15 + 8) / (30 + 8)  # behind 8 forwards of one token each (the prior)
    assert policy.costs.tokens_per_forward() == pytest.approx(yield_)
    assert policy.costs.draft_cost() == pytest.approx(0.1 / yield_)
    for _ in range(29):  # the window (32 rounds) full: the prior matters less
        policy.update(through_text(forwards=10, proposed=5, accepted=5))
    assert policy.costs.tokens_per_forward() == pytest.approx((160 + 8) / (320 + 8))
    # A catch-up is fed in the draft's own tokens: a forward's cost each.
    assert policy.costs.catchup_cost(6) == pytest.approx(5 * 0.1)


def test_rounds_whose_text_does_not_re_encode_raise_the_price() -> None:
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 1.0, 1))
    policy.update(through_text(forwards=4, proposed=4, accepted=4))
    assert policy.costs.draft_cost() == pytest.approx(0.1)
    policy.update(through_text(forwards=4, proposed=0, accepted=0))  # nothing proposed
    assert policy.costs.tokens_per_forward() == pytest.approx((8 + 4) / (8 + 8))
    for _ in range(8):
        policy.update(through_text(forwards=4, proposed=0, accepted=0))
    assert policy.costs.draft_cost() == pytest.approx(0.1 * (8 + 40) / (8 + 4))


def test_one_short_first_draft_does_not_set_the_yield() -> None:
    # The first draft's 4 tokens gave 1 target token (its text's tail held back): drafting
    # must still look worth starting (the Gemma-3 draft for Qwen once never drafted again).
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 1.0, 1))
    policy.update(through_text(forwards=4, proposed=1, accepted=1))
    assert policy.costs.tokens_per_forward() > 0.7
    assert policy.model_value() > 0.0


def test_a_draft_whose_forwards_yield_little_stands_aside() -> None:
    # The same forward cost (0.1 steps) and acceptance: drafting pays when a forward
    # yields a target token, not when it takes twenty forwards to propose one.
    def trained(proposed: int) -> AdaptivePolicy:
        policy = AdaptivePolicy(max_tokens=20)
        policy.update(make_round(0, 0, (), 0.0, 1.0, 1))
        for _ in range(30):
            policy.update(through_text(forwards=20, proposed=proposed, accepted=proposed))
        return policy

    assert trained(proposed=20).model_value() > 0.0
    assert trained(proposed=1).costs.draft_cost() > 1.5  # a step and a half per token
    assert trained(proposed=1).model_value() <= 0.0
    assert trained(proposed=1).max_lookahead(catchup=1, remaining=100) == 0


def test_a_draft_of_target_tokens_costs_per_forward() -> None:
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 1.0, 1))
    policy.update(result(5, 5, draft_s=0.1, target_s=1.2))
    assert policy.costs.tokens_per_forward() == 1.0
    assert policy.costs.draft_cost() == pytest.approx(policy.costs.forward_cost())
