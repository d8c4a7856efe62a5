"""Greedy losslessness of prompt lookup and the hybrid: dynaspec's output equals
transformers' own greedy generate, exactly, on tiny fp32 models (real KV caches).

The models have a small vocabulary (16) and the prompts repeat a random segment, so matches
happen in the prompt and, as greedy tiny models fall into loops, in the generated text:
copies are accepted in some rounds and rejected in others (checked below, so the grid
means something).
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import ARCHITECTURES, CacheCheckStreamer, hf_greedy, noisy_copy, tiny_model
from transformers import PreTrainedModel

import dynaspec
from dynaspec.backends.hf import HFAdapter

VOCAB_SIZE = 16
MAX_NEW_TOKENS = 24
SCHEDULES = ("dynamic", "constant", "heuristic", "adaptive")
SOURCES = ("lookup", "hybrid-same", "hybrid-noisy")


def repeating_prompts(count: int, seed: int = 3) -> list[torch.Tensor]:
    """(1, T) prompts: a random segment, repeated two or three times, then a random tail."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for index in range(count):
        segment = torch.randint(
            0,
            VOCAB_SIZE,
            (int(torch.randint(2, 6, (1,), generator=generator)),),
            generator=generator,
        )
        tail = torch.randint(0, VOCAB_SIZE, (index % 3,), generator=generator)
        prompts.append(torch.cat([segment.repeat(2 + index % 2), tail])[None])
    return prompts


PROMPTS = repeating_prompts(6)


class Models:
    """Each tiny model and each reference output, built once for the module."""

    def __init__(self) -> None:
        self.models: dict[tuple[str, str], PreTrainedModel] = {}
        self.references: dict[tuple[str, int], torch.Tensor] = {}

    def get(self, arch: str, kind: str) -> PreTrainedModel:
        if (arch, kind) not in self.models:
            if kind == "target":
                model = tiny_model(arch, seed=0, vocab_size=VOCAB_SIZE)
            else:
                model = noisy_copy(
                    self.get(arch, "target"), scale=0.0 if kind == "same" else 0.1, seed=1
                )
            self.models[(arch, kind)] = model
        return self.models[(arch, kind)]

    def reference(self, arch: str, prompt_index: int) -> torch.Tensor:
        key = (arch, prompt_index)
        if key not in self.references:
            self.references[key] = hf_greedy(
                self.get(arch, "target"), PROMPTS[prompt_index], MAX_NEW_TOKENS
            )
        return self.references[key]


@pytest.fixture(scope="module")
def models() -> Models:
    return Models()


def run(
    models: Models, arch: str, source: str, prompt_index: int, **kwargs
) -> dynaspec.GenerateOutput:
    draft = None if source == "lookup" else models.get(arch, source.split("-")[1])
    return dynaspec.generate(
        models.get(arch, "target"),
        draft,
        PROMPTS[prompt_index],
        max_new_tokens=MAX_NEW_TOKENS,
        eos_token_id=[],
        **kwargs,
    )


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_equals_hf_generate(models: Models, arch: str, source: str, schedule: str) -> None:
    case = (
        SCHEDULES.index(schedule)
        + len(SCHEDULES) * SOURCES.index(source)
        + ARCHITECTURES.index(arch)
    )
    prompt_index = case % len(PROMPTS)
    out = run(
        models,
        arch,
        source,
        prompt_index,
        num_assistant_tokens=4,
        num_assistant_tokens_schedule=schedule,
        prompt_lookup_num_tokens=1 + case % 6,
        max_matching_ngram_size=1 + case % 3,
    )
    assert out.sequences.tolist() == models.reference(arch, prompt_index).tolist()
    assert out.stats.summary().new_tokens == MAX_NEW_TOKENS


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_copies_are_accepted_and_rejected(models: Models, arch: str) -> None:
    """The grid means something: over the prompts, copies are both accepted and rejected."""
    accepted = rejected = 0
    for prompt_index in range(len(PROMPTS)):
        out = run(models, arch, "lookup", prompt_index, prompt_lookup_num_tokens=5)
        assert out.sequences.tolist() == models.reference(arch, prompt_index).tolist()
        for record in out.stats.rounds:
            accepted += min(record.num_accepted, record.num_copied)
            rejected += record.num_copied > record.num_accepted
    assert accepted > 0 and rejected > 0, (accepted, rejected)


@pytest.mark.parametrize("draft_kind", ["same", "noisy"])
def test_hybrid_keeps_the_cache_invariants_on_real_caches(models: Models, draft_kind: str) -> None:
    """After every round the target's cache holds committed - 1 tokens and the draft's at
    most that, whether the model drafted after a copy, stood aside, or drafted alone."""
    target = HFAdapter(models.get("llama", "target"))
    draft = HFAdapter(models.get("llama", draft_kind))
    carried = 0
    for prompt_index in range(len(PROMPTS)):
        streamer = CacheCheckStreamer(target, draft)
        out = dynaspec.generate(
            target,
            draft,
            PROMPTS[prompt_index],
            max_new_tokens=MAX_NEW_TOKENS,
            num_assistant_tokens=6,
            num_assistant_tokens_schedule="constant",
            prompt_lookup_num_tokens=3,
            eos_token_id=[],
            streamer=streamer,
        )
        assert out.sequences.tolist() == models.reference("llama", prompt_index).tolist()
        assert len(streamer.rounds) == len(out.stats.rounds)
        assert target.cache.get_seq_length() == out.sequences.shape[1] - 1
        carried += sum(r.num_copied and r.num_drafted > r.num_copied for r in out.stats.rounds)
    assert carried > 0  # the model carried on after a copy in some rounds


def test_eos_and_length_with_prompt_lookup(models: Models) -> None:
    """EOS emitted mid-way (possibly inside an accepted copy) stops exactly like transformers."""
    target = models.get("gpt2", "target")
    for prompt_index in range(3):
        prompt = PROMPTS[prompt_index]
        free_run = models.reference("gpt2", prompt_index)[0, prompt.shape[1] :]
        eos = int(free_run[5])
        expected = hf_greedy(target, prompt, MAX_NEW_TOKENS, eos_token_id=eos)
        for draft in (None, models.get("gpt2", "same")):
            out = dynaspec.generate(
                target,
                draft,
                prompt,
                max_new_tokens=MAX_NEW_TOKENS,
                prompt_lookup_num_tokens=6,
                eos_token_id=eos,
            )
            assert out.sequences.tolist() == expected.tolist()
