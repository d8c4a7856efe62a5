"""Lookahead policies: their update rules, make_policy, and how generate() treats their state."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from round_helpers import make_round
from tiny_models import ScriptedModel, shift_rule, tiny_model

import dynaspec
from dynaspec.core.config import SpecConfig
from dynaspec.core.round import DraftOptions, DraftPlan, StopReason
from dynaspec.errors import ConfigError
from dynaspec.policies import (
    AdaptivePolicy,
    ConstantPolicy,
    DraftStep,
    DynamicPolicy,
    HeuristicPolicy,
    LookaheadPolicy,
    OraclePolicy,
    Round,
    Stopper,
    make_policy,
)


def result(num_drafted: int, num_accepted: int) -> Round:
    return make_round(num_drafted, num_accepted, (0.5,) * num_drafted)


def step(
    confidence: float = 0.5, *, index: int = 0, position: int = 0, token: int = 0
) -> DraftStep:
    return DraftStep(index=index, position=position, token=token, confidence=confidence)


# ---------------------------------------------------------------------------------------
# Update rules
# ---------------------------------------------------------------------------------------


def test_heuristic_plus_two_minus_one_floor_one_and_reset() -> None:
    policy = HeuristicPolicy(3)
    assert policy.max_lookahead() == 3
    policy.update(result(3, 3))
    assert policy.max_lookahead() == 5
    policy.update(result(5, 5))
    assert policy.max_lookahead() == 7
    policy.update(result(7, 2))
    assert policy.max_lookahead() == 6
    for _ in range(10):
        policy.update(result(policy.max_lookahead(), 0))
    assert policy.max_lookahead() == 1  # floor
    policy.update(result(1, 0))
    assert policy.max_lookahead() == 1
    policy.update(result(1, 1))
    assert policy.max_lookahead() == 3
    policy.reset()
    assert policy.max_lookahead() == 3
    assert not policy.should_stop(step(0.0))


def test_heuristic_ignores_rounds_without_a_draft() -> None:
    policy = HeuristicPolicy(4)
    policy.update(result(0, 0))  # e.g. the last round, where only the target ran
    assert policy.max_lookahead() == 4


@settings(max_examples=100, deadline=None)
@given(
    start=st.integers(1, 30),
    rounds=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=30),
)
def test_heuristic_matches_its_rule(start: int, rounds: list[tuple[int, int]]) -> None:
    policy = HeuristicPolicy(start)
    expected = start
    for drafted, accepted in rounds:
        accepted = min(accepted, drafted)
        policy.update(result(drafted, accepted))
        if drafted:
            expected = expected + 2 if accepted == drafted else max(1, expected - 1)
        assert policy.max_lookahead() == expected >= 1
    policy.reset()
    assert policy.max_lookahead() == start


def test_dynamic_stops_below_the_threshold() -> None:
    policy = DynamicPolicy(num_assistant_tokens=7, threshold=0.4)
    assert policy.max_lookahead() == 7
    assert policy.should_stop(step(0.39))
    assert not policy.should_stop(step(0.4))  # "below": equal keeps drafting
    assert not policy.should_stop(step(0.95))
    assert policy.stop_reason == "confidence"
    policy.update(result(7, 0))
    policy.reset()
    assert policy.max_lookahead() == 7  # no learned state


@settings(max_examples=100, deadline=None)
@given(
    threshold=st.floats(0.0, 1.0),
    confidence=st.floats(0.0, 1.0),
    lookahead=st.integers(1, 50),
)
def test_dynamic_rule(threshold: float, confidence: float, lookahead: int) -> None:
    policy = DynamicPolicy(lookahead, threshold)
    assert policy.should_stop(step(confidence)) == (confidence < threshold)
    assert policy.max_lookahead() == lookahead


@given(confidence=st.floats(0.0, 1.0))
def test_dynamic_threshold_zero_never_stops(confidence: float) -> None:
    assert not DynamicPolicy(20, 0.0).should_stop(step(confidence))


def test_constant_never_changes() -> None:
    policy = ConstantPolicy(4)
    for drafted, accepted in [(4, 4), (4, 0), (0, 0)]:
        policy.update(result(drafted, accepted))
        assert policy.max_lookahead() == 4
        assert not policy.should_stop(step(0.0))
    assert policy.stop_reason == "max"


def test_oracle_stops_right_after_the_first_differing_token() -> None:
    reference = [9, 9, 1, 2, 3, 4, 5]  # prompt [9, 9], then the target's tokens
    policy = OraclePolicy(reference, max_tokens=10)
    assert policy.max_lookahead() == 10
    assert not policy.should_stop(step(position=2, token=1))
    assert not policy.should_stop(step(position=3, token=2, index=1))
    assert policy.should_stop(step(position=4, token=7, index=2))  # differs: sent, then stop
    assert policy.should_stop(step(position=7, token=0))  # past the reference: stop
    assert policy.stop_reason == "oracle"


def test_every_policy_implements_the_protocol() -> None:
    for policy in (
        ConstantPolicy(2),
        HeuristicPolicy(2),
        DynamicPolicy(2, 0.4),
        OraclePolicy([1, 2], 3),
        AdaptivePolicy(2),
    ):
        assert isinstance(policy, LookaheadPolicy)
        stopper = policy.stopper(policy.plan(DraftOptions(1), None))
        assert isinstance(stopper, Stopper) and isinstance(stopper.reason, StopReason)
        assert isinstance(policy.name, str) and isinstance(stopper.needs_confidence, bool)


def test_a_schedule_copies_the_whole_match_then_the_model_up_to_its_lookahead() -> None:
    policy = ConstantPolicy(5)
    copy = torch.tensor([4, 5, 6])
    assert policy.plan(DraftOptions(1, copy, 2), None) == DraftPlan(3, 2)
    assert policy.plan(DraftOptions(None, copy, 2), None) == DraftPlan(3, 0)  # no model
    assert policy.plan(DraftOptions(1), None) == DraftPlan(0, 5)  # no match
    assert ConstantPolicy(2).plan(DraftOptions(1, copy, 2), None) == DraftPlan(3, 0)


# ---------------------------------------------------------------------------------------
# make_policy
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule,cls",
    [
        ("constant", ConstantPolicy),
        ("heuristic", HeuristicPolicy),
        ("heuristic_transient", HeuristicPolicy),
        ("dynamic", DynamicPolicy),
    ],
)
def test_make_policy_names(schedule: str, cls: type) -> None:
    config = SpecConfig(
        num_assistant_tokens=6,
        assistant_confidence_threshold=0.3,
        num_assistant_tokens_schedule=schedule,
    )
    policy = make_policy(config)
    assert type(policy) is cls
    assert policy.max_lookahead() == 6
    if cls is DynamicPolicy:
        assert policy.threshold == 0.3
    assert make_policy(config) is not policy  # fresh each time


def test_make_policy_default_is_adaptive_dynamic_keeps_20_and_0_4() -> None:
    assert make_policy(SpecConfig()).name == "adaptive"
    policy = make_policy(SpecConfig(num_assistant_tokens_schedule="dynamic"))
    assert isinstance(policy, DynamicPolicy)
    assert (policy.max_lookahead(), policy.threshold) == (20, 0.4)


def test_make_policy_adaptive() -> None:
    pytest.importorskip("dynaspec.policies.adaptive")
    policy = make_policy(SpecConfig(num_assistant_tokens_schedule="adaptive"))
    assert isinstance(policy, LookaheadPolicy)
    assert policy.name == "adaptive"


def test_make_policy_unknown_name() -> None:
    config = SimpleNamespace(
        num_assistant_tokens_schedule="fastest",
        num_assistant_tokens=5,
        assistant_confidence_threshold=0.4,
    )
    with pytest.raises(ConfigError, match="fastest"):
        make_policy(config)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------
# generate(): policy state is per call unless the caller owns the policy
# ---------------------------------------------------------------------------------------

VOCAB_SIZE = 16


def agreeing_pair() -> tuple[ScriptedModel, ScriptedModel]:
    rule = shift_rule(1, VOCAB_SIZE)
    return ScriptedModel.greedy(rule, VOCAB_SIZE), ScriptedModel.greedy(rule, VOCAB_SIZE)


def drafted_per_round(out: dynaspec.GenerateOutput) -> list[int]:
    return [r.num_drafted for r in out.stats.rounds]


def test_caller_policy_carries_state_between_calls() -> None:
    target, draft = agreeing_pair()
    policy = HeuristicPolicy(1)
    prompt = torch.tensor([[0]])
    first = dynaspec.generate(target, draft, prompt, max_new_tokens=12, policy=policy)
    assert drafted_per_round(first) == [1, 3, 5]  # 2 + 4 + 6 = 12 tokens
    grown = policy.max_lookahead()
    assert grown == 7
    second = dynaspec.generate(target, draft, prompt, max_new_tokens=30, policy=policy)
    assert drafted_per_round(second)[0] == grown  # not reset: starts where it left off
    policy.reset()
    assert policy.max_lookahead() == 1


def test_default_policy_is_fresh_for_every_call() -> None:
    target, draft = agreeing_pair()
    prompt = torch.tensor([[0]])
    kwargs = dict(
        max_new_tokens=12, num_assistant_tokens=1, num_assistant_tokens_schedule="heuristic"
    )
    first = dynaspec.generate(target, draft, prompt, **kwargs)
    second = dynaspec.generate(target, draft, prompt, **kwargs)
    assert drafted_per_round(first) == drafted_per_round(second) == [1, 3, 5]


def test_caller_policy_is_not_reset_by_generate() -> None:
    class Spy(ConstantPolicy):
        resets = 0

        def reset(self) -> None:
            self.resets += 1

    target, draft = agreeing_pair()
    policy = Spy(2)
    dynaspec.generate(target, draft, torch.tensor([[0]]), max_new_tokens=4, policy=policy)
    assert policy.resets == 0


@pytest.mark.parametrize("schedule", ["dynamic", "heuristic", "heuristic_transient", "constant"])
def test_nothing_is_written_onto_the_models_or_their_configs(schedule: str) -> None:
    target = tiny_model("llama", seed=0, vocab_size=32)
    draft = tiny_model("llama", seed=1, vocab_size=32)
    snapshots = [
        (m.config.to_dict(), m.generation_config.to_dict(), set(vars(m))) for m in (target, draft)
    ]
    for _ in range(2):
        dynaspec.generate(
            target,
            draft,
            torch.tensor([[1, 2, 3]]),
            max_new_tokens=6,
            num_assistant_tokens=2,
            num_assistant_tokens_schedule=schedule,
        )
    after = [
        (m.config.to_dict(), m.generation_config.to_dict(), set(vars(m))) for m in (target, draft)
    ]
    assert after == snapshots
