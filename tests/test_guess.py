"""A guess fed to the draft model (DraftPlan.guess, drafters/draft_model.py): the proposal
is the one the draft makes without it, token for token (greedy and seeded sampling), with
fewer forwards where the guess is right; the draft's cache stays consistent; and the hybrid
with guesses still gives transformers' greedy output exactly, on tiny fp32 models."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import torch
from round_helpers import make_round
from tiny_models import ARCHITECTURES, hf_greedy, noisy_copy, tiny_model

import dynaspec
from dynaspec.backends.hf import HFAdapter
from dynaspec.compat.records import SamplingConfig
from dynaspec.core.protocols import LookaheadPolicy, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, Proposal, Round, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters import ModelDrafter
from dynaspec.policies import AdaptivePolicy, ConstantPolicy
from dynaspec.policies.base import RuleStopper
from dynaspec.policies.source_plan import plan_with_copy

VOCAB_SIZE = 16
PROMPT = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])
LOOKAHEAD = 6


def draft_once(
    guess: torch.Tensor | None,
    do_sample: bool = False,
    lookahead: int = LOOKAHEAD,
    stopper: Stopper | None = None,
    checked: int = 0,
) -> tuple[Proposal, ModelDrafter]:
    """The tiny draft's proposal after PROMPT with `guess` (the first `checked` of it a copy
    it checks), under `stopper` (None: drafting all `lookahead` tokens)."""
    model = HFAdapter(tiny_model("llama", seed=0, vocab_size=VOCAB_SIZE))
    drafter = ModelDrafter(model)
    drafter.begin(PROMPT)
    config = SamplingConfig(do_sample=do_sample, temperature=1.0, seed=7)
    sampler = TokenSampler(config)
    stopper = stopper or ConstantPolicy(lookahead).stopper(DraftPlan(model=lookahead))
    with torch.inference_mode():
        proposal = drafter.draft(
            PROMPT[0], lookahead, stopper, sampler, (), guess=guess, checked=checked
        )
    return proposal, drafter


def own_draft() -> list[int]:
    return draft_once(None)[0].tokens.tolist()


@pytest.mark.parametrize("right", [0, 1, 3, LOOKAHEAD - 1])
def test_a_guess_changes_the_forwards_not_the_proposal(right: int) -> None:
    """The first `right` guessed tokens are the draft's own, the rest wrong: the same tokens
    and confidences; one forward drafts the right ones and the token after them."""
    own = own_draft()
    wrong = [(token + 1) % VOCAB_SIZE for token in own]
    guess = torch.tensor(own[:right] + wrong[right:])
    proposal, drafter = draft_once(guess)
    plain, plain_drafter = draft_once(None)
    assert proposal.tokens.tolist() == own
    assert proposal.confidences == pytest.approx(plain.confidences, abs=1e-5)
    assert proposal.draft_forwards == LOOKAHEAD - right
    assert proposal.guess_hits == right
    assert proposal.guess_fed == LOOKAHEAD - 1
    # The cache holds the prompt and the drafted tokens but the newest, as without a guess.
    assert drafter.model.num_cached == plain_drafter.model.num_cached
    assert drafter.model.num_cached == PROMPT.shape[1] + LOOKAHEAD - 1


def test_a_guess_longer_than_the_lookahead_is_cut() -> None:
    own = own_draft()
    proposal, drafter = draft_once(torch.tensor(own + own), lookahead=LOOKAHEAD)
    assert proposal.tokens.tolist() == own
    assert proposal.draft_forwards == 1 and proposal.guess_fed == LOOKAHEAD - 1


def test_seeded_sampling_draws_the_same_tokens_with_a_guess() -> None:
    """Each guessed row is sampled as its own forward's would be, in the same order: the
    same seed draws the same tokens and the same distributions."""
    plain, _ = draft_once(None, do_sample=True)
    sampled = plain.tokens.tolist()
    guess = torch.tensor(sampled[:3] + [(sampled[3] + 1) % VOCAB_SIZE, *sampled[4:]])
    proposal, _ = draft_once(guess[: LOOKAHEAD - 1], do_sample=True)
    assert proposal.tokens.tolist() == sampled
    assert torch.allclose(proposal.probs, plain.probs, atol=1e-5)
    assert proposal.draft_forwards == LOOKAHEAD - 3


def test_the_adaptive_rule_guesses_with_the_copy_it_declines() -> None:
    """Where the model drafts alone over a match on offer, the continuation is its guess,
    as far as the copy's chance stays above the guess's price."""
    policy = AdaptivePolicy(8)
    options = DraftOptions(1, torch.arange(10), agreement=32)
    plan = plan_with_copy(policy, options, 100, DraftPlan(model=8))
    assert plan.model > 0 or plan.copy > 0
    if plan.model:
        assert 0 < plan.guess <= plan.model - 1
    assert DraftPlan(model=4, guess=9).within(3).guess == 2


class GuessingPolicy(ConstantPolicy):
    """The model drafts num_assistant_tokens every round, a match's continuation its guess."""

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        lookahead = self.num_assistant_tokens
        return DraftPlan(model=lookahead, guess=min(options.num_copy, lookahead - 1))


def hybrid_rounds(
    arch: str, make_policy: Callable[[], LookaheadPolicy], scales: tuple[float, ...]
) -> list[Round]:
    """The rounds of the hybrid (prompt lookup, 8, and a draft that is the target with noise
    of each scale) on prompts that repeat a random segment three times, on real caches,
    each output asserted to be transformers' greedy output exactly."""
    target = tiny_model(arch, seed=0, vocab_size=VOCAB_SIZE)
    generator = torch.Generator().manual_seed(5)
    rounds: list[Round] = []
    for index, scale in enumerate(scales):
        draft = noisy_copy(target, scale=scale, seed=1)
        segment = torch.randint(0, VOCAB_SIZE, (5 + index,), generator=generator)
        prompt = segment.repeat(3)[None]
        out = dynaspec.generate(
            target,
            draft,
            prompt,
            max_new_tokens=30,
            prompt_lookup_num_tokens=8,
            eos_token_id=[],
            policy=make_policy(),
        )
        assert out.sequences.tolist() == hf_greedy(target, prompt, 30).tolist()
        rounds += out.stats.rounds
    return rounds


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_hybrid_with_guesses_equals_transformers_greedy(arch: str) -> None:
    """Every round guesses with the match on offer, on real caches: guesses hit and miss,
    and the output is transformers' greedy output exactly."""
    rounds = hybrid_rounds(arch, lambda: GuessingPolicy(5), (0.0, 0.1, 0.0))
    hits = sum(r.guess_hits for r in rounds)
    missed = sum(r.guess_fed > r.guess_hits for r in rounds)
    assert hits > 0 and missed > 0, (hits, missed)


def test_a_guessed_forward_does_not_teach_a_forward_s_time_or_the_yield() -> None:
    """A round whose first forward took a guess: a forward's time and the draft's yield are
    learned from the other rounds only, and a catch-up's time per token counts the guess."""
    policy = AdaptivePolicy(max_tokens=20)
    policy.update(make_round(0, 0, (), 0.0, 1.0, 1))  # a target step: 1 s
    policy.update(make_round(4, 4, (0.9,) * 4, 0.4, 1.2, draft_forwards=4, catchup=1))
    assert policy.costs.forward_cost() == pytest.approx(0.1)
    guessed = replace(
        make_round(8, 8, (0.9,) * 8, 0.5, 1.3, draft_forwards=2, catchup=1),
        guess_fed=7,
        guess_hits=6,
    )
    policy.update(guessed)
    assert policy.costs.forward_cost() == pytest.approx(0.1)  # not 0.25 a forward
    assert policy.costs.tokens_per_forward() == pytest.approx((8 + 4 + 2) / (8 + 4 + 2))
    caught_up = replace(
        make_round(3, 3, (0.9,) * 3, 0.7, 1.2, draft_forwards=3, catchup=11),
        guess_fed=9,
        guess_hits=2,
    )
    policy.update(caught_up)
    # The first forward: 0.7 s - 2 forwards of 0.1 s, over 11 + 9 tokens fed.
    assert policy.costs.catchup_costs[-1] == pytest.approx(0.5 / 20)
    assert policy.costs.guess_price() == pytest.approx(0.025 / 0.1)


@pytest.mark.parametrize("right", [True, False])
def test_a_stop_inside_the_guess_keeps_only_the_drafted_tokens_cached(right: bool) -> None:
    """The stopper ends the draft at its second token, inside the guess (which is right or
    wrong there): the cache holds the prompt and the first token only, as one forward a
    token would leave it, never a guessed token the draft did not draft."""
    own = own_draft()
    second = own[1] if right else (own[1] + 1) % VOCAB_SIZE
    guess = torch.tensor([own[0], second, *own[2:]])
    model = HFAdapter(tiny_model("llama", seed=0, vocab_size=VOCAB_SIZE))
    drafter = ModelDrafter(model)
    drafter.begin(PROMPT)
    stopper = RuleStopper(lambda step: step.index >= 1, StopReason.COST, True)
    sampler = TokenSampler(SamplingConfig())
    with torch.inference_mode():
        proposal = drafter.draft(PROMPT[0], LOOKAHEAD, stopper, sampler, (), guess=guess)
        assert proposal.tokens.tolist() == own[:2]
        assert proposal.stop_reason == StopReason.COST
        assert model.num_cached == PROMPT.shape[1] + 1
        # What the cache holds drafts on exactly as a fresh run over the same tokens.
        after = model.forward(torch.tensor(own[1:2]), 1)
        fresh = HFAdapter(tiny_model("llama", seed=0, vocab_size=VOCAB_SIZE))
        fresh.begin(PROMPT)
        expected = fresh.forward(torch.cat([PROMPT[0], torch.tensor(own[:2])]), 1)
    assert torch.allclose(after, expected, atol=1e-5)
