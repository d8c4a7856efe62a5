"""The expected-speedup model reproduces hand-computed examples."""

from __future__ import annotations

import dataclasses

import pytest
from tiny_models import ScriptedModel, shift_rule

from dynaspec.errors import ConfigError
from dynaspec.eval.cost_model import (
    CostProfile,
    baseline_time,
    measure_costs,
    pooled_speedup,
    predicted_speedup,
    predicted_time,
)

# c_d = 0.1 s, T(n) = 1 + 0.1 (n - 1) s for n = 1..10 (the module docstring's example)
PROFILE = CostProfile(draft_token_s=0.1, verify_s=tuple(1 + 0.1 * n for n in range(10)))
ROUNDS = [(3, 2), (1, 0), (5, 5)]


def test_hand_computed_example():
    # (3 * 0.1 + T(4)) + (1 * 0.1 + T(2)) + (5 * 0.1 + T(6)) = 1.6 + 1.2 + 2.0
    assert predicted_time(ROUNDS, PROFILE) == pytest.approx(4.8)
    # N = (2 + 1) + (0 + 1) + (5 + 1) = 10 tokens, target alone 10 * T(1) = 10 s
    assert baseline_time(10, PROFILE) == pytest.approx(10.0)
    assert predicted_speedup(ROUNDS, PROFILE) == pytest.approx(10 / 4.8)
    assert predicted_speedup(ROUNDS, PROFILE, new_tokens=9) == pytest.approx(9 / 4.8)


def test_hand_computed_example_with_prefill():
    # The docstring's second example: 10 prompt tokens, p_t = 0.2 s, p_d = 0.05 s.
    profile = dataclasses.replace(PROFILE, target_prefill_token_s=0.2, draft_prefill_token_s=0.05)
    assert predicted_time(ROUNDS, profile, prompt_tokens=10) == pytest.approx(7.3)
    assert baseline_time(10, profile, prompt_tokens=10) == pytest.approx(12.0)
    assert predicted_speedup(ROUNDS, profile, prompt_tokens=10) == pytest.approx(12 / 7.3)
    # A decode that never drafts never runs the draft, so pays no draft prefill.
    assert predicted_speedup([(0, 0)] * 5, profile, prompt_tokens=10) == pytest.approx(1.0)


def test_target_alone_rounds_give_speedup_one():
    assert predicted_speedup([(0, 0)] * 7, PROFILE) == pytest.approx(1.0)


def test_overhead_per_round():
    profile = CostProfile(draft_token_s=0.1, verify_s=(1.0, 1.0), overhead_s=0.5)
    # rounds (1, 1), (1, 0): 2 * (0.1 + 1.0 + 0.5) = 3.2 s for 3 tokens; alone 3 * 1.5 = 4.5 s
    assert predicted_speedup([(1, 1), (1, 0)], profile) == pytest.approx(4.5 / 3.2)


def test_pooled_speedup_adds_times():
    decodes = [(ROUNDS, 10, 0), ([(0, 0)] * 4, 4, 0)]
    # (10 + 4) s alone against (4.8 + 4) s
    assert pooled_speedup(decodes, PROFILE) == pytest.approx(14 / 8.8)


def test_verify_time_extrapolates_linearly_with_non_negative_slope():
    profile = CostProfile(draft_token_s=0.0, verify_s=(1.0, 1.2, 1.5))
    assert profile.verify_time(3) == 1.5
    assert profile.verify_time(5) == pytest.approx(1.5 + 2 * 0.3)
    falling = CostProfile(draft_token_s=0.0, verify_s=(1.0, 0.9))
    assert falling.verify_time(8) == pytest.approx(0.9)
    assert CostProfile(draft_token_s=0.0, verify_s=(2.0,)).verify_time(4) == 2.0
    with pytest.raises(ConfigError):
        profile.verify_time(0)


def test_invalid_profiles_are_rejected():
    with pytest.raises(ConfigError):
        CostProfile(draft_token_s=0.1, verify_s=())
    with pytest.raises(ConfigError):
        CostProfile(draft_token_s=-1.0, verify_s=(1.0,))


def test_json_roundtrip():
    data = PROFILE.to_json()
    assert data["draft_cost_ratio"] == pytest.approx(0.1)
    assert CostProfile.from_json(data) == PROFILE
    with_prefill = dataclasses.replace(PROFILE, target_prefill_token_s=0.2)
    assert CostProfile.from_json(with_prefill.to_json()) == with_prefill
    del data["target_prefill_token_s"], data["draft_prefill_token_s"]  # an older file
    assert CostProfile.from_json(data).target_prefill_token_s == 0.0


def test_measure_costs_on_fake_models():
    import torch

    target = ScriptedModel.greedy(shift_rule(1, 8), 8)
    draft = ScriptedModel.greedy(shift_rule(1, 8), 8)
    profile = measure_costs(target, draft, torch.tensor([[1, 2, 3]]), max_tokens=4, reps=2)
    assert len(profile.verify_s) == 4
    assert profile.draft_token_s > 0 and min(profile.verify_s) > 0
    # every timed forward appended to the cached prompt, then was cropped back
    assert [len(call) for call in target.calls[1:5]] == [1, 2, 3, 4]
    assert target.num_cached == 0 and draft.num_cached == 0
    # then each prefix was prefilled again, on an empty cache, for p_t and p_d
    assert [len(call) for call in target.calls[-2:]] == [3, 3]
    assert [len(call) for call in draft.calls[-2:]] == [3, 3]
    assert profile.target_prefill_token_s > 0 and profile.draft_prefill_token_s > 0
