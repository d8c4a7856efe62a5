"""The draft's cost before it is timed: its weight bytes over the target's
(backends/weights.py), handed to the adaptive policies that generate(), batches and the
server build; the fixed schedules and a caller's own policy are left alone."""

from __future__ import annotations

import pytest
import torch
from tiny_models import ScriptedModel, tiny_model

import dynaspec
from dynaspec.backends import FastConfig, StaticAdapter, as_adapter
from dynaspec.backends.weights import draft_cost_ratio, weight_bytes
from dynaspec.batch import batch_policy
from dynaspec.core.config import SpecConfig
from dynaspec.policies import AdaptivePolicy, make_policy


def pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    target = tiny_model("llama", num_layers=4, seed=0)
    draft = tiny_model("llama", num_layers=1, seed=1)
    return target, draft


def parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * 4 for p in model.parameters())  # float32


def test_weight_bytes_of_models_and_adapters() -> None:
    target, draft = pair()
    assert weight_bytes(target) == parameter_bytes(target)
    assert weight_bytes(as_adapter(target)) == parameter_bytes(target)
    fast = StaticAdapter(target, FastConfig())
    assert weight_bytes(fast) == fast.weight_bytes() > 0
    assert weight_bytes(ScriptedModel.greedy(lambda p: 0, 8)) is None
    ratio = draft_cost_ratio(target, draft)
    assert ratio == pytest.approx(parameter_bytes(draft) / parameter_bytes(target))
    assert 0.0 < ratio < 1.0
    assert draft_cost_ratio(target, None) is None


def test_the_ratio_is_c_until_a_draft_forward_is_timed() -> None:
    policy = make_policy(SpecConfig(num_assistant_tokens_schedule="adaptive"), 0.4)
    assert isinstance(policy, AdaptivePolicy)
    assert policy.costs.draft_cost() == pytest.approx(0.4)
    policy.reset()  # a reset keeps it: it is the policy's configuration
    assert policy.costs.draft_cost() == pytest.approx(0.4)
    fixed = make_policy(SpecConfig(num_assistant_tokens_schedule="constant"), 0.4)
    assert not hasattr(fixed, "costs")
    batch = batch_policy(SpecConfig(num_assistant_tokens_schedule="adaptive"), 2, 0.4)
    assert batch.shared.costs.draft_cost() == pytest.approx(0.4)


def test_generate_hands_the_ratio_to_its_fresh_policy(monkeypatch) -> None:
    target, draft = pair()
    seen = []
    original = AdaptivePolicy.expect_draft_cost

    def spy(self, ratio):
        seen.append(ratio)
        original(self, ratio)

    monkeypatch.setattr(AdaptivePolicy, "expect_draft_cost", spy)
    ids = torch.tensor([[1, 2, 3, 4]])
    dynaspec.generate(target, draft, ids, max_new_tokens=4)
    dynaspec.generate(target, draft, torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), max_new_tokens=4)
    assert seen == [pytest.approx(draft_cost_ratio(target, draft))] * 2
    mine = AdaptivePolicy()
    dynaspec.generate(target, draft, ids, max_new_tokens=4, policy=mine)
    assert mine.config.prior_draft_cost == AdaptivePolicy().config.prior_draft_cost
