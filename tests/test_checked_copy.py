"""A copy the draft model checks (DraftPlan.checked, policies/source_plan.py): the draft
drafts through the copied tokens it agrees with without its stopper's say and on by its
rule after them; the adaptive rule sends a running draft a short match's copy that way; the
output stays transformers' greedy output exactly, and under sampling the target's
distribution (chi-square)."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from test_guess import VOCAB_SIZE, draft_once, hybrid_rounds, own_draft
from test_sampling import PROMPT, assert_follows_target, exact_distribution, scripted_pair
from tiny_models import ARCHITECTURES

from dynaspec.compat.records import SamplingConfig
from dynaspec.core.config import LimitsConfig
from dynaspec.core.loop import decode
from dynaspec.core.round import DraftOptions, DraftPlan, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter
from dynaspec.drafters.prompt_lookup import LookupConfig
from dynaspec.policies import AdaptivePolicy, ConstantPolicy
from dynaspec.policies.adaptive import AdaptiveConfig
from dynaspec.policies.base import RuleStopper
from dynaspec.policies.source_plan import plan_with_copy


def draft(guess: list[int], checked: int) -> list[int]:
    """The tiny draft's tokens with `guess`, the first `checked` of it a checked copy, under a
    stopper that stops at every token it is asked about."""
    always = RuleStopper(lambda step: True, StopReason.COST, True)
    proposal, _ = draft_once(torch.tensor(guess), lookahead=8, stopper=always, checked=checked)
    return proposal.tokens.tolist()


@pytest.mark.parametrize("right", [0, 2, 5])
def test_the_draft_runs_through_the_copy_it_agrees_with(right: int) -> None:
    """A stopper that stops at once: the draft still drafts the checked copy's first `right`
    tokens (its own), then the token where it parts from the copy, where it is asked."""
    own = own_draft()
    copy = own[:right] + [(own[right] + 1) % VOCAB_SIZE] + own[right + 1 : 6]
    assert draft(copy, checked=len(copy)) == own[: right + 1]
    assert draft(copy, checked=0) == own[:1]  # a plain guess: the stopper has its say
    assert draft(own[:6], checked=3) == own[:4]  # only the checked tokens go unasked


def test_the_rule_checks_a_short_match_s_copy_with_a_running_draft() -> None:
    copy = torch.arange(12)
    policy = AdaptivePolicy(8)

    def plan(agreement: int, checks: bool = True, started: bool = True) -> DraftPlan:
        options = DraftOptions(1, copy, agreement, checks=checks, started=started)
        return plan_with_copy(policy, options, 100, DraftPlan())

    sent = plan(1, checks=False)
    assert sent.copy > 0 and not sent.checked  # the rule copies at agreement 1
    checked = plan(1)
    assert checked.copy == 0 and checked.checked == checked.guess == sent.copy
    assert checked.model == sent.copy + 8
    assert plan(4).copy > 0 and not plan(4).checked  # a long enough match is copied
    assert plan(1, started=False).copy > 0  # a draft that has not run is not started for it
    policy.config = AdaptiveConfig(max_tokens=8, check_below=0)
    assert plan(1).copy > 0  # 0: never
    assert DraftPlan(model=6, guess=9, checked=9).within(4).checked == 3


class CheckingPolicy(ConstantPolicy):
    """Every match on offer is checked whole by the draft (up to the lookahead)."""

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        lookahead = self.num_assistant_tokens
        guess = min(options.num_copy, lookahead - 1)
        return DraftPlan(model=lookahead, guess=guess, checked=guess)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_hybrid_checking_copies_equals_transformers_greedy(arch: str) -> None:
    """The adaptive rule checks every copy (check_below above any agreement), on real caches
    and a draft that is right and wrong: transformers' greedy output exactly."""
    config = AdaptiveConfig(max_tokens=5, check_below=64)
    rounds = hybrid_rounds(arch, lambda: AdaptivePolicy(config=config), (0.0, 0.1, 0.3))
    assert sum(r.plan.checked > 0 for r in rounds) > 0


def test_sampling_with_checked_copies_follows_the_target() -> None:
    """Three sampled tokens over a 4-token vocabulary, every match checked by a draft far
    from the target: the sequences follow the target's distribution."""
    config = SamplingConfig(do_sample=True, seed=6)
    target, draft_model = scripted_pair()
    sampler = TokenSampler(config)
    lookup = LookupConfig(prompt_lookup_num_tokens=3, max_matching_ngram_size=1)
    prompt = torch.tensor([PROMPT * 3])
    counts: Counter[tuple[int, ...]] = Counter()
    checked = 0
    with torch.inference_mode():
        for _ in range(1500):
            drafter = HybridDrafter(ModelDrafter(draft_model), PromptLookupDrafter(lookup, 4, ()))
            out = decode(target, drafter, prompt, CheckingPolicy(3), sampler, LimitsConfig(3))
            counts[tuple(out.sequences[0, prompt.shape[1] :].tolist())] += 1
            checked += sum(r.plan.checked > 0 for r in out.stats.rounds)
    assert checked > 0
    assert_follows_target(counts, exact_distribution(3, config))
