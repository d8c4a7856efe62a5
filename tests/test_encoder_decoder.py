"""Encoder-decoder models (T5, BART): the same guarantees as for decoder-only pairs (issue 6).

Tiny fp32 T5 and BART models are built from a config and re-initialised with large weights
and an untied output head, so their greedy outputs vary with the input and their top-2
logits are far apart (the reference fixture asserts a margin): greedy output must equal
`target.generate(...)` exactly. Drafts: the target's weights copied (every drafted token is
accepted), the target's weights plus noise (some are), and an unrelated smaller model.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from scipy.stats import chisquare
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    EncoderDecoderCache,
    GPT2Config,
    GPT2LMHeadModel,
    T5Config,
    T5ForConditionalGeneration,
)

import dynaspec
from dynaspec.backends.hf import HFAdapter
from dynaspec.compat.records import SamplingConfig
from dynaspec.compat.validation import check_lengths
from dynaspec.core.sampling import TokenSampler
from dynaspec.errors import IncompatibleModelsError, InputError, UnsupportedModelError

VOCAB = 40
MAX_NEW = 12
PROMPT_LENGTHS = (3, 8, 11, 5)
ARCHS = ("t5", "bart")
DRAFTS = ("identical", "perturbed", "unrelated")
SCHEDULES = (
    {"num_assistant_tokens_schedule": "dynamic", "num_assistant_tokens": 8},  # threshold 0.4
    {"num_assistant_tokens_schedule": "dynamic", "assistant_confidence_threshold": 0.9},
    {"num_assistant_tokens_schedule": "heuristic", "num_assistant_tokens": 2},
    {"num_assistant_tokens_schedule": "constant", "num_assistant_tokens": 1},
    {"num_assistant_tokens_schedule": "constant", "num_assistant_tokens": 4},
)
MIN_TOP2_MARGIN = 1e-3  # fp32 noise between a 1-token and a k-token forward is ~1e-6


# ---------------------------------------------------------------------------------------
# Tiny models
# ---------------------------------------------------------------------------------------


def _reinit(model: Any, seed: int, scale: float, head_scale: float) -> Any:
    """Every matrix ~ N(0, scale^2 / fan_in); embeddings N(0, 1); the head larger (peaky)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() != 2:
                continue  # layer norms keep their ones, biases their zeros
            if "lm_head" in name:
                std = head_scale / param.shape[1] ** 0.5
            elif "embed" in name or "shared" in name:
                std = 1.0
            else:
                std = scale / param.shape[1] ** 0.5
            param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model.eval()


def tiny_t5(
    seed: int, *, vocab: int = VOCAB, d_model: int = 32, layers: int = 2, **init: float
) -> T5ForConditionalGeneration:
    config = T5Config(
        vocab_size=vocab,
        d_model=d_model,
        d_kv=8,
        d_ff=2 * d_model,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=20,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,  # T5 still ties; the head is untied below
    )
    model = T5ForConditionalGeneration(config)
    # A head tied to the input embeddings makes tiny models repeat their last token forever.
    model.lm_head.weight = torch.nn.Parameter(torch.empty(vocab, d_model))
    return _reinit(model, seed, init.get("scale", 0.7), init.get("head_scale", 10.0))


def tiny_bart(
    seed: int, *, vocab: int = VOCAB, d_model: int = 32, layers: int = 2, **init: float
) -> BartForConditionalGeneration:
    config = BartConfig(
        vocab_size=vocab,
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=2 * d_model,
        decoder_ffn_dim=2 * d_model,
        max_position_embeddings=64,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=None,  # BART's default forces EOS at max_length in HF generate
        tie_word_embeddings=False,
    )
    model = BartForConditionalGeneration(config)
    return _reinit(model, seed, init.get("scale", 0.7), init.get("head_scale", 10.0))


BUILDERS = {"t5": tiny_t5, "bart": tiny_bart}


def perturbed(model: Any, noise: float, seed: int) -> Any:
    """A copy of `model` with every matrix moved by `noise` times its own spread."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            if param.dim() == 2:
                param.add_(torch.randn(param.shape, generator=generator) * noise * param.std())
    return draft


def hf_greedy(model: Any, input_ids: torch.Tensor, max_new_tokens: int, **kwargs: Any) -> Any:
    with torch.inference_mode():
        return model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            output_scores=True,
            return_dict_in_generate=True,
            **kwargs,
        )


@dataclass
class Family:
    """A target, its drafts, prompts and the target's own greedy outputs."""

    target: Any
    drafts: dict[str, Any]
    prompts: list[torch.Tensor]  # (1, T) each
    references: list[torch.Tensor]  # (1 + new,) each: decoder start token, then new tokens


@functools.cache
def family(arch: str) -> Family:
    build = BUILDERS[arch]
    target = build(0)
    drafts = {
        "identical": copy.deepcopy(target),
        "perturbed": perturbed(target, 0.2, seed=1),
        "unrelated": build(2, d_model=16, layers=1, head_scale=3.0),
    }
    generator = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, VOCAB, (1, n), generator=generator) for n in PROMPT_LENGTHS]
    references = []
    for prompt in prompts:
        out = hf_greedy(target, prompt, MAX_NEW)
        scores = torch.stack(out.scores)[:, 0]  # (new, V)
        top2 = scores.topk(2, dim=-1).values
        assert float((top2[:, 0] - top2[:, 1]).min()) > MIN_TOP2_MARGIN, "near-tie: reseed"
        references.append(out.sequences[0])
    return Family(target, drafts, prompts, references)


def full_length_prompt(fam: Family) -> tuple[torch.Tensor, torch.Tensor]:
    """The first prompt whose reference runs to MAX_NEW tokens without stopping at EOS."""
    for prompt, reference in zip(fam.prompts, fam.references, strict=True):
        if reference.numel() == 1 + MAX_NEW:
            return prompt, reference
    raise AssertionError("no reference of full length: reseed the tiny models")


# ---------------------------------------------------------------------------------------
# Adapters that watch the real HF adapter
# ---------------------------------------------------------------------------------------


class WatchedAdapter:
    """Delegates to an HFAdapter and checks its EncoderDecoderCache on every call.

    After every forward and crop the decoder self-attention cache holds exactly
    `num_cached` tokens; the cross-attention cache holds the prompt's length and is the
    very tensor computed in the first decoder forward (never recomputed, never cropped).
    `wrong_positions`: positions at which this model's argmax is made wrong on purpose
    (its logits are rolled by one), to script how many drafted tokens are accepted.
    """

    def __init__(self, model: Any, wrong_positions: frozenset[int] = frozenset()) -> None:
        self.inner = HFAdapter(model)
        self.vocab_size = self.inner.vocab_size
        self.max_length = self.inner.max_length
        self.is_encoder_decoder = self.inner.is_encoder_decoder
        self.wrong_positions = wrong_positions
        self.prompt_length = 0
        self.cross_keys: list[torch.Tensor] | None = None
        self.num_crops = 0

    @property
    def num_cached(self) -> int:
        return self.inner.num_cached

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        self.prompt_length = input_ids.shape[1]
        self.cross_keys = None
        return self.inner.begin(input_ids, max_length=max_length)

    def _check_cache(self) -> None:
        cache = self.inner.cache
        assert isinstance(cache, EncoderDecoderCache)
        layers = cache.cross_attention_cache.layers
        for layer in range(len(layers)):
            assert cache.self_attention_cache.get_seq_length(layer) == self.num_cached
            assert cache.cross_attention_cache.get_seq_length(layer) == self.prompt_length
        keys = [layer.keys for layer in layers]
        if self.cross_keys is None:
            self.cross_keys = keys
        assert all(a is b for a, b in zip(keys, self.cross_keys, strict=True))

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        logits = self.inner.forward(new_tokens, num_logits)  # (num_logits, V)
        self._check_cache()
        if self.num_cached in self.wrong_positions:  # the last row predicts this position
            assert num_logits == 1
            logits = logits.roll(1, dims=-1)
        return logits

    def crop(self, num_tokens: int) -> None:
        self.inner.crop(num_tokens)
        self.num_crops += 1
        self._check_cache()


@contextlib.contextmanager
def count_encoder_calls(model: Any) -> Iterator[list[int]]:
    calls = [0]

    def hook(*_: Any) -> None:
        calls[0] += 1

    handle = model.get_encoder().register_forward_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


# ---------------------------------------------------------------------------------------
# Greedy equality
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: "-".join(map(str, s.values())))
@pytest.mark.parametrize("draft_kind", DRAFTS)
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_equals_target_generate(arch: str, draft_kind: str, schedule: dict) -> None:
    fam = family(arch)
    draft = fam.drafts[draft_kind]
    for prompt, reference in zip(fam.prompts, fam.references, strict=True):
        out = dynaspec.generate(fam.target, draft, prompt, max_new_tokens=MAX_NEW, **schedule)
        assert out.sequences[0].tolist() == reference.tolist()
        assert sum(r.num_emitted for r in out.stats.rounds) == reference.numel() - 1


@pytest.mark.parametrize("arch", ARCHS)
def test_target_alone_equals_target_generate(arch: str) -> None:
    fam = family(arch)
    for prompt, reference in zip(fam.prompts, fam.references, strict=True):
        out = dynaspec.generate(fam.target, None, prompt, max_new_tokens=MAX_NEW)
        assert out.sequences[0].tolist() == reference.tolist()


@pytest.mark.parametrize("arch", ARCHS)
def test_sequences_start_with_decoder_start_token(arch: str) -> None:
    fam = family(arch)
    start = fam.target.generation_config.decoder_start_token_id
    out = dynaspec.generate(fam.target, fam.drafts["perturbed"], fam.prompts[0], max_new_tokens=4)
    assert out.sequences.shape[0] == 1
    assert int(out.sequences[0, 0]) == start
    assert out.stats.prompt_tokens == fam.prompts[0].shape[1]


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 7])
@pytest.mark.parametrize("arch", ARCHS)
def test_max_new_tokens_inside_a_draft(arch: str, max_new_tokens: int) -> None:
    fam = family(arch)
    prompt, reference = full_length_prompt(fam)
    out = dynaspec.generate(
        fam.target,
        fam.drafts["identical"],
        prompt,
        max_new_tokens=max_new_tokens,
        num_assistant_tokens_schedule="constant",
        num_assistant_tokens=5,
    )
    assert out.sequences[0].tolist() == reference[: 1 + max_new_tokens].tolist()


# ---------------------------------------------------------------------------------------
# Caches, encoder runs, scripted acceptance
# ---------------------------------------------------------------------------------------


def expected_accepted(wrong: frozenset[int], lookahead: int, max_new_tokens: int) -> list[int]:
    """Accepted drafted tokens per round for a draft wrong exactly at `wrong` positions."""
    length, accepted = 1, []  # the decoder start token is committed first
    while length - 1 < max_new_tokens:
        room = max_new_tokens - (length - 1)
        drafted = min(lookahead, room - 1)
        num = 0
        while num < drafted and length + num not in wrong:
            num += 1
        accepted.append(num)
        length += num + 1
    return accepted


@pytest.mark.parametrize(
    "wrong",
    [frozenset(), frozenset({2, 3, 7, 12}), frozenset(range(1, 100))],
    ids=["all-accepted", "some-accepted", "none-accepted"],
)
@pytest.mark.parametrize("arch", ARCHS)
def test_scripted_acceptance_and_cache_rollback(arch: str, wrong: frozenset[int]) -> None:
    fam = family(arch)
    prompt, reference = full_length_prompt(fam)
    target = WatchedAdapter(fam.target)
    draft = WatchedAdapter(fam.drafts["identical"], wrong_positions=wrong)
    lookahead = 4
    with (
        count_encoder_calls(fam.target) as target_encodes,
        count_encoder_calls(fam.drafts["identical"]) as draft_encodes,
    ):
        out = dynaspec.generate(
            target,
            draft,
            prompt,
            max_new_tokens=MAX_NEW,
            num_assistant_tokens_schedule="constant",
            num_assistant_tokens=lookahead,
        )
    assert out.sequences[0].tolist() == reference.tolist()
    rounds = out.stats.rounds
    assert [r.num_accepted for r in rounds] == expected_accepted(wrong, lookahead, MAX_NEW)
    assert all(r.num_emitted == r.num_accepted + 1 for r in rounds)
    assert target_encodes[0] == 1 and draft_encodes[0] == 1  # each encodes the prompt once
    assert target.num_crops == len(rounds) and draft.num_crops == len(rounds)
    assert target.num_cached == reference.numel() - 1  # the newest token is kept out
    summary = out.stats.summary()
    if not wrong:
        # Every round's drafts all accepted: the draft lags one token and catches up.
        assert all(r.num_accepted == r.num_drafted for r in rounds)
        assert summary.acceptance_rate == 1.0
        assert len(rounds) == 3  # 5 + 5 tokens, then 2 (1 drafted) up to MAX_NEW
    if wrong == frozenset(range(1, 100)):
        assert summary.acceptance_rate == 0.0
        assert len(rounds) == MAX_NEW


def test_cross_attention_cache_survives_crop() -> None:
    """EncoderDecoderCache.crop (transformers 5.x) removes self-attention tokens only."""
    fam = family("t5")
    adapter = HFAdapter(fam.target)
    prompt = fam.prompts[2]
    start = adapter.begin(prompt)
    adapter.forward(torch.cat([start, fam.references[2][1:6]]), 1)
    cache = adapter.cache
    assert isinstance(cache, EncoderDecoderCache)
    assert cache.self_attention_cache.get_seq_length() == 6
    adapter.crop(2)
    assert adapter.num_cached == 2
    assert cache.self_attention_cache.get_seq_length() == 2
    assert cache.cross_attention_cache.get_seq_length() == prompt.shape[1]
    assert all(cache.is_updated.values())  # the next forward reuses the cross-attention


# ---------------------------------------------------------------------------------------
# EOS
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
def test_eos_inside_an_accepted_draft(arch: str) -> None:
    fam = family(arch)
    prompt, reference = full_length_prompt(fam)
    tokens = reference.tolist()
    # EOS := a token first produced at position >= 3, so it falls inside the first draft.
    position = next(i for i in range(3, len(tokens)) if tokens[i] not in tokens[1:i])
    eos = tokens[position]
    expected = hf_greedy(fam.target, prompt, MAX_NEW, eos_token_id=eos).sequences[0]
    assert expected.tolist() == tokens[: position + 1]
    out = dynaspec.generate(
        fam.target,
        fam.drafts["identical"],
        prompt,
        max_new_tokens=MAX_NEW,
        eos_token_id=eos,
        num_assistant_tokens_schedule="constant",
        num_assistant_tokens=8,
    )
    assert out.sequences[0].tolist() == expected.tolist()
    first = out.stats.rounds[0]
    assert len(out.stats.rounds) == 1  # EOS was accepted inside the first draft...
    # ...drafting stopped at the drafted EOS, and nothing after it was emitted.
    assert first.num_drafted == first.num_accepted == first.num_emitted == position
    assert first.stop_reason == "eos"


# ---------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------


def test_sampling_follows_the_target_distribution() -> None:
    """Chi-square of the first two sampled tokens against the target's exact distribution."""
    vocab, temperature = 4, 1.5
    target = tiny_t5(10, vocab=vocab, d_model=16, layers=1, head_scale=1.0)
    draft = tiny_t5(11, vocab=vocab, d_model=16, layers=1, head_scale=1.0)
    target.generation_config.eos_token_id = None  # sample every token, never stop early
    prompt = torch.tensor([[3, 2, 3, 1, 2]])
    start = target.generation_config.decoder_start_token_id
    # Exact p(t1, t2) = p(t1 | start) p(t2 | start, t1): one forward over all V prefixes.
    decoder_input_ids = torch.tensor([[start, t1] for t1 in range(vocab)])  # (V, 2)
    with torch.inference_mode():
        logits = target(
            input_ids=prompt.expand(vocab, -1), decoder_input_ids=decoder_input_ids
        ).logits  # (V, 2, V)
    sampler = TokenSampler(SamplingConfig(do_sample=True, temperature=temperature))
    first_probs = sampler.probs(logits[0, :1])[0]  # (V,)
    second_probs = sampler.probs(logits[:, 1])  # (V, V): row t1
    exact = (first_probs[:, None] * second_probs).flatten().double()  # (V * V,)

    num_samples = 300
    counts = torch.zeros(vocab * vocab, dtype=torch.float64)
    drafted = accepted = 0
    for seed in range(num_samples):
        out = dynaspec.generate(
            target,
            draft,
            prompt,
            max_new_tokens=3,
            do_sample=True,
            temperature=temperature,
            seed=seed,
            num_assistant_tokens_schedule="constant",
            num_assistant_tokens=2,
        )
        t1, t2 = out.sequences[0, 1:3].tolist()
        counts[t1 * vocab + t2] += 1
        drafted += sum(r.num_drafted for r in out.stats.rounds)
        accepted += sum(r.num_accepted for r in out.stats.rounds)
    assert 0.2 * drafted < accepted < 0.9 * drafted  # both acceptance and rejection happen
    expected = exact / exact.sum() * num_samples
    big = expected >= 5  # pool the rare cells so the chi-square approximation holds
    observed = torch.cat([counts[big], counts[~big].sum().view(1)])
    expected = torch.cat([expected[big], expected[~big].sum().view(1)])
    assert int(big.sum()) >= 6
    assert chisquare(observed.numpy(), expected.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
def test_seeded_sampling_is_deterministic(arch: str) -> None:
    fam = family(arch)

    def sample(seed: int) -> list[int]:
        out = dynaspec.generate(
            fam.target,
            fam.drafts["perturbed"],
            fam.prompts[1],
            max_new_tokens=10,
            do_sample=True,
            temperature=2.0,
            seed=seed,
            # A fixed schedule: adaptive's rounds depend on measured times, and with them
            # which random numbers each token consumes (the distribution is exact either way).
            num_assistant_tokens_schedule="dynamic",
        )
        return out.sequences[0].tolist()

    assert sample(7) == sample(7)
    assert len({tuple(sample(seed)) for seed in range(4)}) > 1


# ---------------------------------------------------------------------------------------
# Validation: pairs, lengths, start token
# ---------------------------------------------------------------------------------------


def tiny_gpt2(vocab: int = VOCAB) -> GPT2LMHeadModel:
    config = GPT2Config(vocab_size=vocab, n_embd=16, n_layer=1, n_head=2, n_positions=64)
    return GPT2LMHeadModel(config).eval()


def test_mixed_pairs_are_rejected() -> None:
    t5, gpt2, prompt = family("t5").target, tiny_gpt2(), torch.tensor([[3, 4, 5]])
    with pytest.raises(IncompatibleModelsError, match="encoder-decoder but the draft is decoder"):
        dynaspec.generate(t5, gpt2, prompt, max_new_tokens=4)
    with pytest.raises(IncompatibleModelsError, match="decoder-only but the draft is encoder"):
        dynaspec.generate(gpt2, t5, prompt, max_new_tokens=4)


def test_encoder_decoder_vocabularies_must_match() -> None:
    target, draft = family("t5").target, tiny_t5(4, vocab=VOCAB + 8, d_model=16, layers=1)
    with pytest.raises(IncompatibleModelsError, match="vocabulary"):
        dynaspec.generate(target, draft, torch.tensor([[3, 4, 5]]), max_new_tokens=4)


def test_context_limits_of_encoder_decoder_models() -> None:
    bart = family("bart").target  # max_position_embeddings=64, encoder and decoder alike
    assert HFAdapter(bart).max_length == 64
    with pytest.raises(InputError, match="lower max_new_tokens to 63"):
        dynaspec.generate(bart, None, torch.tensor([[3, 4, 5]]), max_new_tokens=64)
    with pytest.raises(InputError, match="shorten the prompt"):
        dynaspec.generate(bart, None, torch.full((1, 65), 3), max_new_tokens=4)
    prompt = torch.full((1, 64), 5)  # both limits reached exactly: accepted, and like HF
    out = dynaspec.generate(bart, bart, prompt, max_new_tokens=63)
    assert out.sequences[0].tolist() == hf_greedy(bart, prompt, 63).sequences[0].tolist()
    # T5's positions are relative: no limit on either side.
    t5 = HFAdapter(family("t5").target)
    assert t5.max_length is None
    check_lengths([t5], prompt_tokens=10_000, max_new_tokens=10_000)


def test_decoder_start_falls_back_to_bos_like_transformers() -> None:
    model = copy.deepcopy(family("t5").target)
    model.generation_config.decoder_start_token_id = None
    model.generation_config.bos_token_id = 5
    prompt = family("t5").prompts[0]
    expected = hf_greedy(model, prompt, 4).sequences[0].tolist()
    assert expected[0] == 5
    assert dynaspec.generate(model, None, prompt, max_new_tokens=4).sequences[0].tolist() == (
        expected
    )
    model.generation_config.bos_token_id = None
    with pytest.raises(UnsupportedModelError, match="decoder_start_token_id"):
        dynaspec.generate(model, None, prompt, max_new_tokens=4)
