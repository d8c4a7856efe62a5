"""Greedy losslessness: dynaspec's output equals transformers' own greedy generate, exactly.

Tiny fp32 models with peaky logits (initializer_range 0.5), so fp32 ties cannot hide a bug:
every comparison is token-for-token. The grid is architectures x drafts (identical weights:
everything accepted; target + noise: some accepted; another random init: ~nothing accepted)
x schedules/thresholds; each case decodes one prompt from a pool, rotating, so the grid
as a whole covers every prompt with every schedule and draft. Tests taking `device` run on a
GPU too when there is one (`pytest -m cuda`), with the prompts left on the CPU.
"""

from __future__ import annotations

from copy import deepcopy

import pytest
import torch
from tiny_models import (
    ARCHITECTURES,
    CacheCheckStreamer,
    hf_greedy,
    noisy_copy,
    random_prompts,
    tiny_model,
)
from transformers import PreTrainedModel

import dynaspec
from dynaspec.backends.hf import HFAdapter

MAX_NEW_TOKENS = 8
VOCAB_SIZE = 64
NUM_PROMPTS = 6  # prompt pool, shared by the architectures

# (schedule, assistant_confidence_threshold, num_assistant_tokens). The threshold only acts
# in "dynamic"; the others get varied thresholds anyway to show it is ignored there.
SCHEDULES = [
    ("dynamic", 0.0, 4),
    ("dynamic", 0.2, 4),
    ("dynamic", 0.4, 4),
    ("dynamic", 0.9, 4),
    ("dynamic", 0.4, 20),
    ("heuristic", 0.4, 2),
    ("heuristic_transient", 0.9, 3),
    ("constant", 0.0, 3),
    ("constant", 0.4, 1),
]
DRAFT_KINDS = ("same", "noisy", "random")


class Zoo:
    """Builds each tiny model and each reference output once for this module (per device)."""

    def __init__(self) -> None:
        self._models: dict[tuple[str, str, str], PreTrainedModel] = {}
        self._references: dict[tuple[str, int, int, str], torch.Tensor] = {}
        self.prompts = random_prompts(NUM_PROMPTS, VOCAB_SIZE, min_len=1, max_len=10, seed=7)

    def target(self, arch: str, device: str = "cpu") -> PreTrainedModel:
        return self._model(arch, "target", device)

    def draft(self, arch: str, kind: str, device: str = "cpu") -> PreTrainedModel:
        """'same': a copy of the target; 'noisy': target + 10% noise; 'random': another init."""
        return self._model(arch, kind, device)

    def _model(self, arch: str, kind: str, device: str = "cpu") -> PreTrainedModel:
        key = (arch, kind, device)
        if key not in self._models and device != "cpu":  # the CPU model's weights, moved
            self._models[key] = deepcopy(self._model(arch, kind)).to(device)
        if key not in self._models:
            if kind == "target":
                model = tiny_model(arch, seed=0, vocab_size=VOCAB_SIZE)
            elif kind == "same":
                model = noisy_copy(self.target(arch), scale=0.0)  # its own module, same weights
            elif kind == "noisy":
                model = noisy_copy(self.target(arch), scale=0.1, seed=1)
            else:
                model = tiny_model(arch, seed=1, vocab_size=VOCAB_SIZE)
            self._models[key] = model
        return self._models[key]

    def reference(
        self, arch: str, prompt_index: int, max_new_tokens: int, device: str = "cpu"
    ) -> torch.Tensor:
        """transformers' greedy output on `device`, (1, T + new), on the CPU."""
        key = (arch, prompt_index, max_new_tokens, device)
        if key not in self._references:
            prompt = self.prompts[prompt_index].to(device)
            output = hf_greedy(self.target(arch, device), prompt, max_new_tokens)
            self._references[key] = output.cpu()
        return self._references[key]


@pytest.fixture(scope="module")
def zoo() -> Zoo:
    return Zoo()


@pytest.mark.parametrize("schedule,threshold,lookahead", SCHEDULES)
@pytest.mark.parametrize("draft_kind", DRAFT_KINDS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_greedy_equals_hf_generate(
    zoo: Zoo,
    arch: str,
    draft_kind: str,
    schedule: str,
    threshold: float,
    lookahead: int,
    device: str,
) -> None:
    # One prompt per case, rotating through the pool so every prompt meets every schedule.
    case = (
        SCHEDULES.index((schedule, threshold, lookahead))
        + len(SCHEDULES) * DRAFT_KINDS.index(draft_kind)
        + ARCHITECTURES.index(arch)
    )
    prompt_index = case % NUM_PROMPTS
    prompt = zoo.prompts[prompt_index]
    out = dynaspec.generate(
        zoo.target(arch, device),
        zoo.draft(arch, draft_kind, device),
        prompt,
        max_new_tokens=MAX_NEW_TOKENS,
        num_assistant_tokens=lookahead,
        assistant_confidence_threshold=threshold,
        num_assistant_tokens_schedule=schedule,
        eos_token_id=[],
    )
    assert out.sequences.device.type == device  # committed tokens live on the target's device
    expected = zoo.reference(arch, prompt_index, MAX_NEW_TOKENS, device)
    assert out.sequences.tolist() == expected.tolist(), f"prompt {prompt.tolist()}"
    summary = out.stats.summary()
    assert summary.new_tokens == MAX_NEW_TOKENS
    if draft_kind == "same":  # identical weights: every drafted token is accepted
        assert summary.acceptance_rate == 1.0
        assert summary.rounds < MAX_NEW_TOKENS


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_drafts_cover_some_and_almost_no_acceptance(zoo: Zoo, arch: str) -> None:
    """The grid means something: the noisy draft is accepted sometimes, the random one rarely."""
    rates = {}
    for draft_kind in ("noisy", "random"):
        accepted = drafted = 0
        for prompt_index in range(2):
            out = dynaspec.generate(
                zoo.target(arch),
                zoo.draft(arch, draft_kind),
                zoo.prompts[prompt_index],
                max_new_tokens=MAX_NEW_TOKENS,
                num_assistant_tokens=3,
                num_assistant_tokens_schedule="constant",
            )
            assert out.sequences.tolist() == zoo.reference(arch, prompt_index, 8).tolist()
            accepted += sum(r.num_accepted for r in out.stats.rounds)
            drafted += sum(r.num_drafted for r in out.stats.rounds)
        rates[draft_kind] = accepted / drafted
    assert 0.0 < rates["noisy"] < 1.0 and rates["random"] < 0.2, rates


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_target_alone_equals_hf_generate(zoo: Zoo, arch: str, device: str) -> None:
    for prompt_index in range(NUM_PROMPTS):
        out = dynaspec.generate(
            zoo.target(arch, device),
            None,
            zoo.prompts[prompt_index],
            max_new_tokens=MAX_NEW_TOKENS,
        )
        expected = zoo.reference(arch, prompt_index, MAX_NEW_TOKENS, device)
        assert out.sequences.tolist() == expected.tolist()
        assert all(r.num_drafted == 0 and r.num_emitted == 1 for r in out.stats.rounds)
        assert out.stats.summary().draft_forwards == 0


def test_many_prompts_default_settings_keep_cache_invariant(zoo: Zoo) -> None:
    """Default schedule (dynamic, 20, 0.4), every pool prompt plus more, on real HF caches."""
    target = HFAdapter(zoo.target("llama"))
    draft = HFAdapter(zoo.draft("llama", "noisy"))
    prompts = zoo.prompts + random_prompts(6, VOCAB_SIZE, min_len=1, max_len=16, seed=99)
    for prompt in prompts:
        streamer = CacheCheckStreamer(target, draft)
        out = dynaspec.generate(target, draft, prompt, max_new_tokens=12, streamer=streamer)
        expected = hf_greedy(zoo.target("llama"), prompt, 12)
        assert out.sequences.tolist() == expected.tolist()
        assert streamer.tokens == expected[0].tolist() and streamer.ended
        assert len(streamer.rounds) == len(out.stats.rounds)
        assert target.cache.get_seq_length() == out.sequences.shape[1] - 1


def test_identical_draft_lags_one_token_after_all_accepted_round(zoo: Zoo) -> None:
    target = HFAdapter(zoo.target("qwen2"))
    draft = HFAdapter(zoo.draft("qwen2", "same"))
    streamer = CacheCheckStreamer(target, draft)
    out = dynaspec.generate(
        target,
        draft,
        zoo.prompts[0],
        max_new_tokens=10,
        num_assistant_tokens=3,
        num_assistant_tokens_schedule="constant",
        streamer=streamer,
    )
    assert out.sequences.tolist() == zoo.reference("qwen2", 0, 10).tolist()
    drafted_rounds = [r for r in out.stats.rounds if r.num_drafted]
    assert drafted_rounds and all(r.num_accepted == r.num_drafted for r in drafted_rounds)
    checks = zip(out.stats.rounds, streamer.rounds, strict=True)
    for record, (length, target_cached, draft_cached) in checks:
        assert target_cached == length - 1
        if record.num_drafted:  # it never ran its last drafted token
            assert draft_cached == length - 2


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
@pytest.mark.parametrize("draft_kind", ["same", "noisy"])
def test_eos_stops_exactly_like_hf(zoo: Zoo, arch: str, draft_kind: str) -> None:
    """EOS is a token the target emits mid-way; with the identical draft it lands inside an
    accepted draft."""
    target = zoo.target(arch)
    for prompt_index in range(3):
        prompt = zoo.prompts[prompt_index]
        free_run = zoo.reference(arch, prompt_index, MAX_NEW_TOKENS)[0, prompt.shape[1] :]
        eos = int(free_run[3])
        expected = hf_greedy(target, prompt, MAX_NEW_TOKENS, eos_token_id=eos)
        out = dynaspec.generate(
            target,
            zoo.draft(arch, draft_kind),
            prompt,
            max_new_tokens=MAX_NEW_TOKENS,
            num_assistant_tokens=5,
            num_assistant_tokens_schedule="constant",
            eos_token_id=eos,
        )
        assert out.sequences.tolist() == expected.tolist()
        new_tokens = out.sequences[0, prompt.shape[1] :].tolist()
        assert new_tokens[-1] == eos and eos not in new_tokens[:-1]
        assert out.stats.summary().new_tokens == len(new_tokens)


def test_eos_list_and_default_from_generation_config() -> None:
    """eos_token_id=None reads the target's generation config; a list stops at any member."""
    target = tiny_model("gpt_neox", seed=0, vocab_size=VOCAB_SIZE)
    prompt = torch.tensor([[5, 9, 2]])
    free_run = hf_greedy(target, prompt, MAX_NEW_TOKENS)[0, 3:].tolist()
    eos = [free_run[4], free_run[2]]
    first_eos = min(i for i, token in enumerate(free_run) if token in eos)
    expected = hf_greedy(target, prompt, MAX_NEW_TOKENS, eos_token_id=eos)
    assert expected.shape[1] == 3 + first_eos + 1 < 3 + MAX_NEW_TOKENS
    out = dynaspec.generate(target, target, prompt, max_new_tokens=MAX_NEW_TOKENS, eos_token_id=eos)
    assert out.sequences.tolist() == expected.tolist()

    with_eos = tiny_model("gpt_neox", seed=0, vocab_size=VOCAB_SIZE, eos_token_id=eos[1])
    out = dynaspec.generate(with_eos, with_eos, prompt, max_new_tokens=MAX_NEW_TOKENS)
    assert out.sequences.tolist() == hf_greedy(with_eos, prompt, MAX_NEW_TOKENS, eos[1]).tolist()
    assert out.sequences.tolist() == expected.tolist()


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3])
def test_short_generations(zoo: Zoo, max_new_tokens: int) -> None:
    for draft_kind in DRAFT_KINDS:
        out = dynaspec.generate(
            zoo.target("llama"),
            zoo.draft("llama", draft_kind),
            zoo.prompts[1],
            max_new_tokens=max_new_tokens,
            num_assistant_tokens=5,
            num_assistant_tokens_schedule="constant",
        )
        assert out.sequences.tolist() == zoo.reference("llama", 1, max_new_tokens).tolist()
        assert out.stats.rounds[-1].num_drafted <= max_new_tokens - 1


def test_one_dimensional_prompt_is_accepted(zoo: Zoo) -> None:
    prompt = zoo.prompts[2]
    out = dynaspec.generate(
        zoo.target("gpt2"), zoo.draft("gpt2", "noisy"), prompt[0], max_new_tokens=MAX_NEW_TOKENS
    )
    assert out.sequences.tolist() == zoo.reference("gpt2", 2, MAX_NEW_TOKENS).tolist()
