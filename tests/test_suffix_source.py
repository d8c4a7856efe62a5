"""The suffix cache as a third draft source: the plan's choice between the copy sources, what
each source's copies teach, the fixed schedules' rule, and exact greedy output on tiny fp32
models with a cache filled by earlier calls (copies from it both accepted and rejected)."""

from __future__ import annotations

import pytest
import torch
from round_helpers import make_round
from tiny_models import hf_greedy, noisy_copy, tiny_model

import dynaspec
from dynaspec.core.round import CopySource, DraftOptions, DraftPlan
from dynaspec.policies import AdaptivePolicy
from dynaspec.policies.base import default_plan


def both(lookup_agreement: int, suffix_agreement: int, frequencies: tuple[float, ...]):
    """A 3-token lookup match and a suffix continuation, no draft model."""
    return DraftOptions(
        None,
        torch.tensor([1, 2, 3]),
        lookup_agreement,
        suffix=torch.tensor([5, 6, 7, 8, 9, 10][: len(frequencies)]),
        suffix_agreement=suffix_agreement,
        suffix_frequencies=frequencies,
    )


def test_the_plan_copies_from_the_source_worth_more() -> None:
    policy = AdaptivePolicy()
    long_suffix = policy.plan(both(1, 32, (1.0,) * 6), None)
    assert long_suffix.source is CopySource.SUFFIX and long_suffix.copy == 6
    rare_suffix = policy.plan(both(8, 2, (0.3,) * 6), None)
    assert rare_suffix.source is CopySource.LOOKUP and rare_suffix.copy == 3


def test_frequencies_shorten_the_copy() -> None:
    policy = AdaptivePolicy()
    options = DraftOptions(
        None,
        suffix=torch.arange(6),
        suffix_agreement=16,
        suffix_frequencies=(1.0, 1.0, 0.05, 1.0, 1.0, 1.0),
    )
    plan = policy.plan(options, None)
    assert plan.source is CopySource.SUFFIX and plan.copy == 2


def test_each_source_learns_from_its_own_copies() -> None:
    policy = AdaptivePolicy()
    suffix_plan = DraftPlan(4, 0, source=CopySource.SUFFIX)
    for _ in range(10):
        policy.learn_tokens(make_round(4, 0, num_copied=4, agreement=16, plan=suffix_plan))
    assert policy.suffix.acceptance(16, 0) < 0.5
    assert policy.lookup.acceptance(16, 0) == pytest.approx(0.9)
    assert sum(policy.lookup.total) == 0


def test_fixed_schedules_copy_prompt_lookup_first() -> None:
    def lookahead(catchup: int, remaining: int | None) -> int:
        return 4

    assert default_plan(both(1, 32, (1.0,) * 6), lookahead, None) == DraftPlan(3, 0)
    only_suffix = DraftOptions(None, suffix=torch.arange(5), suffix_frequencies=(1.0,) * 5)
    assert default_plan(only_suffix, lookahead, None) == DraftPlan(5, 0, source=CopySource.SUFFIX)


VOCAB_SIZE = 16
NEW = 24


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama", seed=0, vocab_size=VOCAB_SIZE)
    return target, noisy_copy(target, scale=0.1, seed=1)


def prompts(count: int, seed: int = 5) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB_SIZE, (1, 6 + k % 4), generator=generator) for k in range(count)]


@pytest.mark.parametrize("schedule", ["adaptive", "dynamic", "constant", "heuristic"])
@pytest.mark.parametrize("source", ["suffix", "suffix+lookup", "suffix+model", "all"])
def test_greedy_with_a_filled_cache_equals_the_target_alone(pair, source, schedule) -> None:
    """Earlier calls fill the cache (each prompt's output, and noise that shares its n-grams);
    later calls on the same and on shifted prompts draft from it; every output is the
    target's own, and copies from the cache were both accepted and rejected."""
    target, noisy = pair
    cache = dynaspec.SuffixCache(size_mb=1)
    generator = torch.Generator().manual_seed(11)
    for _ in range(6):  # noise: wrong continuations of common n-grams
        cache.add(torch.randint(0, VOCAB_SIZE, (40,), generator=generator).tolist())
    draft = noisy if source in ("suffix+model", "all") else None
    lookup = 3 if source in ("suffix+lookup", "all") else None
    accepted = rejected = 0
    for prompt in [*prompts(4), *prompts(4), *[p[:, 1:] for p in prompts(4)]]:
        out = dynaspec.generate(
            target,
            draft,
            prompt,
            max_new_tokens=NEW,
            eos_token_id=[],
            suffix_cache=cache,
            num_assistant_tokens_schedule=schedule,
            num_assistant_tokens=4,
            prompt_lookup_num_tokens=lookup,
        )
        assert out.sequences.tolist() == hf_greedy(target, prompt, NEW).tolist()
        for record in out.stats.rounds:
            if record.plan.source is CopySource.SUFFIX and record.num_copied:
                accepted += min(record.num_accepted, record.num_copied)
                rejected += record.num_copied > record.num_accepted
    assert accepted > 0 and rejected > 0, (accepted, rejected)


def test_sampling_with_a_suffix_cache_is_seeded(pair) -> None:
    """Sampling drafts from the cache too (copies are point masses): two caches holding the
    same text give the same seeded output (a fixed schedule: the adaptive one plans by the
    times it measures)."""
    target, noisy = pair
    runs = []
    for _ in range(2):
        cache = dynaspec.SuffixCache(size_mb=1)
        cache.add(hf_greedy(target, prompts(1)[0], NEW)[0].tolist())
        out = dynaspec.generate(
            target, noisy, prompts(1)[0], max_new_tokens=NEW, eos_token_id=[], do_sample=True,
            seed=3, suffix_cache=cache, num_assistant_tokens_schedule="constant",
        )  # fmt: skip
        assert any(r.plan.source is CopySource.SUFFIX and r.num_copied for r in out.stats.rounds)
        runs.append(out.sequences.tolist())
    assert runs[0] == runs[1]


def test_a_call_reads_and_adds_to_its_own_scope(pair) -> None:
    target, _ = pair
    cache = dynaspec.SuffixCache(size_mb=1)
    prompt = prompts(1)[0]
    kwargs = {"max_new_tokens": NEW, "eos_token_id": [], "prompt_lookup_num_tokens": 3}
    dynaspec.generate(target, None, prompt, suffix_cache=cache.scope("alice"), **kwargs)
    assert cache.scopes() == ["alice"]
    out = dynaspec.generate(target, None, prompt, suffix_cache=cache.scope("bob"), **kwargs)
    assert not any(r.plan.source is CopySource.SUFFIX and r.num_copied for r in out.stats.rounds)
    out = dynaspec.generate(target, None, prompt, suffix_cache=cache.scope("alice"), **kwargs)
    copied = sum(r.num_copied for r in out.stats.rounds if r.plan.source is CopySource.SUFFIX)
    assert copied > NEW // 2  # alice's own earlier output, copied
    assert out.sequences.tolist() == hf_greedy(target, prompt, NEW).tolist()
