"""Speculative sampling with prompt lookup and the hybrid follows the target exactly.

A copied token is a point mass: the target accepts it with its own probability of the
token, and on rejection samples from its distribution with that token removed and
renormalised. Unit tests pin that down on `speculative_sample` with one-hot rows; the
statistical tests decode many sequences from the scripted 4-token models of
test_sampling.py after a prompt that repeats (so copies are proposed in most rounds) and
compare the counts of whole sequences with the target's exact distribution by a
chi-square test. Every run is seeded; deliberately broken verifiers fail the same check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch
from test_sampling import (
    ALPHA,
    DRAFT_LOGITS,
    TARGET_LOGITS,
    VOCAB_SIZE,
    accept_always,
    chi_square_pvalue,
    exact_distribution,
    no_residual,
)
from tiny_models import ScriptedModel

from dynaspec.compat.records import SamplingConfig
from dynaspec.core import loop as decoding
from dynaspec.core.config import LimitsConfig
from dynaspec.core.loop import decode
from dynaspec.core.protocols import LookaheadPolicy
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.verify import speculative_sample
from dynaspec.drafters import make_drafter
from dynaspec.drafters.prompt_lookup import LookupConfig, point_masses
from dynaspec.policies import AdaptivePolicy, ConstantPolicy, DynamicPolicy, Round
from dynaspec.policies.costs import CostModel

# "1 0" repeats: the first round copies 2 3 1 0 ... The scripted target's next token depends
# on the last one only, so after this prompt (ending in 0, like test_sampling's) the target's
# sequence distribution is test_sampling.exact_distribution.
PROMPT = (1, 0, 2, 3, 1, 0)


def test_point_mass_is_accepted_with_the_targets_probability() -> None:
    target_probs = torch.tensor([[0.1, 0.6, 0.3], [1.0, 0.0, 0.0]])
    draft_probs = point_masses(torch.tensor([1]), 3)
    sampled: list[torch.Tensor] = []

    def run(u: float) -> int:
        num_accepted, _ = speculative_sample(
            torch.tensor([1]),
            draft_probs,
            target_probs,
            lambda n: torch.full((n,), u),
            lambda probs: sampled.append(probs) or probs.argmax(),
        )
        return num_accepted

    assert run(0.59) == 1 and run(0.61) == 0  # accepted iff u < p_t(1) = 0.6
    # On rejection: the target's row without token 1, renormalised: [0.25, 0, 0.75].
    assert sampled[-1].tolist() == pytest.approx([0.25, 0.0, 0.75])
    assert run(0.0) == 1  # u = 0 exactly: accepted (p_t > 0)


def test_point_mass_the_target_never_produces_is_rejected() -> None:
    target_probs = torch.tensor([[0.5, 0.0, 0.5], [1.0, 0.0, 0.0]])
    num_accepted, _ = speculative_sample(
        torch.tensor([1]),
        point_masses(torch.tensor([1]), 3),
        target_probs,
        lambda n: torch.zeros(n),
        lambda probs: probs.argmax(),
    )
    assert num_accepted == 0


class FixedCosts(CostModel):
    """Costs that never change (no clock)."""

    def __init__(self) -> None:
        super().__init__(0.05, 0.1, 32, 4)

    def draft_cost(self) -> float:
        return 0.05

    def verify_cost(self, num_tokens: int) -> float:
        return 1.0 + 0.1 * (num_tokens - 1)

    def catchup_cost(self, catchup: int) -> float:
        return 0.02 * (catchup - 1)

    def step_time(self) -> float:
        return 1.0

    def learn(self, round: Round) -> None:
        pass


class FixedCostAdaptive(AdaptivePolicy):
    """The adaptive policy with fixed costs and rate (no clock), so its choices are
    deterministic: they depend on what it learns about acceptance only."""

    def reset(self) -> None:
        super().reset()
        self.costs = FixedCosts()

    def _learn_rate(self, round: Round, tokens: int) -> None:
        pass


def sample_sequences(
    config: SamplingConfig,
    length: int,
    num_samples: int,
    policy: LookaheadPolicy,
    hybrid: bool,
) -> tuple[Counter[tuple[int, ...]], int, int]:
    """Counts of the new tokens over `num_samples` seeded runs, the copied tokens and the
    draft model's tokens. The hybrid copies one token a round, so that the model carries on
    after it within the room of three tokens."""
    target = ScriptedModel(lambda prefix: TARGET_LOGITS[prefix[-1]], VOCAB_SIZE)
    draft = ScriptedModel(lambda prefix: DRAFT_LOGITS[prefix[-1]], VOCAB_SIZE)
    sampler = TokenSampler(config)
    limits = LimitsConfig(max_new_tokens=length)
    prompt = torch.tensor([PROMPT])
    counts: Counter[tuple[int, ...]] = Counter()
    copied = modelled = 0
    with torch.inference_mode():
        for _ in range(num_samples):
            lookup = LookupConfig(prompt_lookup_num_tokens=1 if hybrid else 3)
            drafter = make_drafter(draft if hybrid else None, VOCAB_SIZE, (), lookup)
            out = decode(target, drafter, prompt, policy, sampler, limits)
            counts[tuple(out.sequences[0, len(PROMPT) :].tolist())] += 1
            copied += sum(r.num_copied for r in out.stats.rounds)
            modelled += sum(r.num_drafted - r.num_copied for r in out.stats.rounds)
    return counts, copied, modelled


POLICIES: dict[str, Callable[[], LookaheadPolicy]] = {
    "constant": lambda: ConstantPolicy(3),
    "dynamic": lambda: DynamicPolicy(4, 0.5),
    "adaptive": FixedCostAdaptive,
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("hybrid", [False, True], ids=["lookup", "hybrid"])
def test_sequences_follow_the_target_distribution(policy: str, hybrid: bool) -> None:
    config = SamplingConfig(do_sample=True, seed=11)
    counts, copied, modelled = sample_sequences(config, 3, 1200, POLICIES[policy](), hybrid)
    assert copied + modelled > 600 and copied > 0  # drafted tokens in many rounds
    if hybrid and policy != "adaptive":  # (adaptive chooses one source or the other)
        assert copied > 600 and modelled > 600
    pvalue = chi_square_pvalue(counts, exact_distribution(3, config))
    assert pvalue > ALPHA, f"sequence distribution differs from the target's (p={pvalue:.2e})"


def test_processed_sequences_follow_the_processed_target() -> None:
    config = SamplingConfig(do_sample=True, temperature=0.7, top_k=3, top_p=0.9, seed=12)
    counts, _, _ = sample_sequences(config, 3, 1000, ConstantPolicy(3), hybrid=True)
    assert chi_square_pvalue(counts, exact_distribution(3, config)) > ALPHA


@pytest.mark.parametrize("broken,num_samples", [(accept_always, 300), (no_residual, 600)])
@pytest.mark.parametrize("hybrid", [False, True], ids=["lookup", "hybrid"])
def test_the_check_fails_for_a_broken_sampler(
    monkeypatch: pytest.MonkeyPatch, broken: Callable, num_samples: int, hybrid: bool
) -> None:
    """The same check with the loop's verifier swapped for a broken one must fail."""
    monkeypatch.setattr(decoding, "speculative_sample", broken)
    config = SamplingConfig(do_sample=True, seed=11)
    counts, _, _ = sample_sequences(config, 3, num_samples, ConstantPolicy(3), hybrid)
    assert chi_square_pvalue(counts, exact_distribution(3, config)) < ALPHA
