"""Speculative sampling: the output follows exactly the target's processed distribution.

The statistical tests decode many short sequences from scripted models over a 4-token
vocabulary, where the draft's distribution differs a lot from the target's, and compare the
counts of whole sequences with the target's exact sequence distribution (the product of its
processed next-token probabilities, with transformers' own warpers) by a chi-square test.
Every run is seeded, so each test is deterministic; a deliberately broken sampler fails the
very same check. Unit tests pin down `verify.greedy_accept` and `verify.speculative_sample`
on hand-made tensors.
"""

from __future__ import annotations

import copy
import itertools
from collections import Counter
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare
from tiny_models import CUDA, ScriptedModel, noisy_copy, probs_logits, tiny_model
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import dynaspec
from dynaspec.compat.records import SamplingConfig
from dynaspec.core import loop as decoding
from dynaspec.core.config import LimitsConfig
from dynaspec.core.finite import all_finite
from dynaspec.core.loop import decode
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.verify import argmax, greedy_accept, speculative_sample
from dynaspec.drafters import ModelDrafter
from dynaspec.policies import ConstantPolicy, DynamicPolicy, LookaheadPolicy

VOCAB_SIZE = 4
ALPHA = 1e-3  # the seeded tests pass with p far above this; broken samplers land far below

# Next-token distributions indexed by the previous token. The draft is deliberately far off
# (after token 0 it mostly proposes 3, which the target rarely picks), so rejections and the
# residual distribution carry much of the mass; after token 3 it is close, so whole drafts
# are accepted too. Every target probability is >= 0.1 so chi-square cells stay well filled.
TARGET_PROBS = [
    [0.40, 0.30, 0.20, 0.10],
    [0.10, 0.40, 0.40, 0.10],
    [0.25, 0.25, 0.25, 0.25],
    [0.10, 0.20, 0.30, 0.40],
]
DRAFT_PROBS = [
    [0.05, 0.05, 0.10, 0.80],
    [0.70, 0.10, 0.10, 0.10],
    [0.10, 0.10, 0.10, 0.70],
    [0.15, 0.20, 0.25, 0.40],
]
TARGET_LOGITS = [probs_logits(row) for row in TARGET_PROBS]
DRAFT_LOGITS = [probs_logits(row) for row in DRAFT_PROBS]
PROMPT = (0,)


def scripted_pair(
    target_device: str = "cpu", draft_device: str = "cpu"
) -> tuple[ScriptedModel, ScriptedModel]:
    target = ScriptedModel(
        lambda prefix: TARGET_LOGITS[prefix[-1]], VOCAB_SIZE, device=target_device
    )
    draft = ScriptedModel(lambda prefix: DRAFT_LOGITS[prefix[-1]], VOCAB_SIZE, device=draft_device)
    return target, draft


def processed(logits: torch.Tensor, config: SamplingConfig) -> torch.Tensor:
    """The reference processing: transformers' warpers in generate()'s order, then softmax."""
    warpers = LogitsProcessorList([TemperatureLogitsWarper(config.temperature)])
    if config.top_k:
        warpers.append(TopKLogitsWarper(config.top_k))
    if config.top_p is not None:
        warpers.append(TopPLogitsWarper(config.top_p))
    return torch.softmax(warpers(None, logits[None].double()), -1)[0]


def exact_distribution(length: int, config: SamplingConfig) -> dict[tuple[int, ...], float]:
    """P(the target alone emits this sequence of `length` tokens after PROMPT)."""
    distribution = {}
    for sequence in itertools.product(range(VOCAB_SIZE), repeat=length):
        prob, prefix = 1.0, PROMPT
        for token in sequence:
            prob *= float(processed(TARGET_LOGITS[prefix[-1]], config)[token])
            prefix = prefix + (token,)
        distribution[sequence] = prob
    return distribution


def sample_sequences(
    config: SamplingConfig,
    length: int,
    num_samples: int,
    make_policy: Callable[[], LookaheadPolicy] | None = lambda: ConstantPolicy(3),
    devices: tuple[str, str] = ("cpu", "cpu"),
) -> Counter[tuple[int, ...]]:
    """Counts of the `length` new tokens over `num_samples` runs of the decoding loop.

    One seeded sampler serves all runs (its generator streams continue), which is both
    reproducible and much faster than one generate() call per sample. make_policy=None
    decodes with the target alone. `devices`: (target's, draft's); each draws from a
    generator on its own device.
    """
    target, draft = scripted_pair(*devices)
    sampler = TokenSampler(config, device=devices[0])
    limits = LimitsConfig(max_new_tokens=length)
    prompt = torch.tensor([PROMPT])
    counts: Counter[tuple[int, ...]] = Counter()
    with torch.inference_mode():
        for _ in range(num_samples):
            policy = make_policy() if make_policy else ConstantPolicy(1)
            drafter = ModelDrafter(draft) if make_policy else None
            out = decode(target, drafter, prompt, policy, sampler, limits)
            counts[tuple(out.sequences[0, len(PROMPT) :].tolist())] += 1
    return counts


def chi_square_pvalue(
    counts: Counter[tuple[int, ...]], distribution: dict[tuple[int, ...], float]
) -> float:
    """p-value of the counts under `distribution`; a sequence of probability 0 must not occur."""
    impossible = {seq: n for seq, n in counts.items() if distribution.get(seq, 0.0) < 1e-12}
    assert not impossible, f"sequences the target can never produce: {impossible}"
    support = [seq for seq, prob in distribution.items() if prob >= 1e-12]
    total = sum(counts.values())
    observed = [counts[seq] for seq in support]
    expected = [distribution[seq] * total for seq in support]
    scale = total / sum(expected)  # renormalise float rounding so the sums agree exactly
    return float(chisquare(observed, [e * scale for e in expected]).pvalue)


def assert_follows_target(counts: Counter, distribution: dict) -> None:
    pvalue = chi_square_pvalue(counts, distribution)
    assert pvalue > ALPHA, f"sequence distribution differs from the target's (p={pvalue:.2e})"


def test_sequences_follow_the_target_distribution(device: str) -> None:
    """Three tokens, lookahead 3: rounds with rejections at every index and all accepted."""
    config = SamplingConfig(do_sample=True, seed=0)
    counts = sample_sequences(config, length=3, num_samples=1500, devices=(device, device))
    assert_follows_target(counts, exact_distribution(3, config))


@pytest.mark.parametrize(
    "devices",
    [pytest.param(("cuda", "cpu"), marks=CUDA), pytest.param(("cpu", "cuda"), marks=CUDA)],
)
def test_draft_on_another_device_keeps_the_distribution(devices: tuple[str, str]) -> None:
    """Draft and target on different devices: each samples with its own device's generator."""
    config = SamplingConfig(do_sample=True, seed=4)
    counts = sample_sequences(config, length=3, num_samples=1500, devices=devices)
    assert_follows_target(counts, exact_distribution(3, config))


@pytest.mark.parametrize(
    "temperature,top_k,top_p",
    [(0.6, None, None), (1.0, 3, None), (1.5, 3, 0.8)],
)
def test_processed_sequences_follow_the_processed_target(
    temperature: float, top_k: int | None, top_p: float | None, device: str
) -> None:
    config = SamplingConfig(
        do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p, seed=1
    )
    counts = sample_sequences(config, length=2, num_samples=500, devices=(device, device))
    assert_follows_target(counts, exact_distribution(2, config))


def test_dynamic_lookahead_keeps_the_distribution(device: str) -> None:
    """Stopping on the draft's own confidence depends only on the draft: still lossless."""
    config = SamplingConfig(do_sample=True, seed=2)
    policy = lambda: DynamicPolicy(3, 0.3)  # noqa: E731
    counts = sample_sequences(config, 3, 800, make_policy=policy, devices=(device, device))
    assert_follows_target(counts, exact_distribution(3, config))


def test_target_alone_follows_the_target_distribution(device: str) -> None:
    config = SamplingConfig(do_sample=True, top_p=0.8, seed=3)
    counts = sample_sequences(config, 2, 500, make_policy=None, devices=(device, device))
    assert_follows_target(counts, exact_distribution(2, config))


def accept_always(draft_tokens, draft_probs, target_probs, uniform, sample):  # noqa: ANN001
    """A broken verifier: keeps every drafted token (the output follows the draft)."""
    k = draft_tokens.shape[0]
    return k, sample(target_probs[k])


def no_residual(draft_tokens, draft_probs, target_probs, uniform, sample):  # noqa: ANN001
    """A subtly broken verifier: after a rejection it samples p_target, not the residual."""
    num_accepted, _ = speculative_sample(draft_tokens, draft_probs, target_probs, uniform, sample)
    return num_accepted, sample(target_probs[num_accepted])


@pytest.mark.parametrize("broken,num_samples", [(accept_always, 300), (no_residual, 900)])
def test_the_check_fails_for_a_broken_sampler(
    monkeypatch: pytest.MonkeyPatch, broken: Callable, num_samples: int, device: str
) -> None:
    """The same check, with the loop's verifier swapped for a broken one, must fail.

    The sample sizes give a chi-square noncentrality of ~1600 (accept_always) and ~70
    (no_residual, a subtle bug): p < ALPHA for ~99.7% of seeds, not just a lucky one.
    """
    monkeypatch.setattr(decoding, "speculative_sample", broken)
    config = SamplingConfig(do_sample=True, seed=0)
    counts = sample_sequences(config, 2, num_samples, devices=(device, device))
    distribution = exact_distribution(2, config)
    assert chi_square_pvalue(counts, distribution) < ALPHA
    with pytest.raises(AssertionError, match="differs from the target"):
        assert_follows_target(counts, distribution)


# ---------------------------------------------------------------------------------------
# Seeded determinism on a tiny transformers model
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_pair() -> tuple:
    # A small initializer_range keeps the distributions broad, so seeds matter.
    target = tiny_model("llama", seed=0, vocab_size=32, initializer_range=0.05)
    return target, noisy_copy(target, scale=0.3, seed=1)


@pytest.mark.parametrize("with_draft", [True, False])
def test_same_seed_same_output_different_seed_different_output(
    tiny_pair: tuple, with_draft: bool, device: str
) -> None:
    """On a GPU too, with the prompt left on the CPU: the models' adapters move it."""
    target, draft = (copy.deepcopy(model).to(device) for model in tiny_pair)
    prompt = torch.tensor([[1, 2, 3]])

    def sampled(seed: int) -> list[int]:
        out = dynaspec.generate(
            target,
            draft if with_draft else None,
            prompt,
            max_new_tokens=10,
            do_sample=True,
            temperature=1.2,
            top_k=20,
            top_p=0.95,
            seed=seed,
            eos_token_id=[],
        )
        return out.sequences[0].tolist()

    first = sampled(7)
    assert sampled(7) == first
    others = {tuple(sampled(seed)) for seed in range(8, 12)}
    assert len(others | {tuple(first)}) > 1


def test_sampling_with_an_identical_draft_accepts_nearly_everything(tiny_pair: tuple) -> None:
    """Same weights, same processing: p_target == p_draft up to rounding, so u * p_d <= p_t.
    (A fixed schedule: `adaptive` rightly never starts a draft as large as the target.)"""
    target, _ = tiny_pair
    out = dynaspec.generate(
        target,
        target,
        torch.tensor([[4]]),
        max_new_tokens=12,
        do_sample=True,
        seed=0,
        eos_token_id=[],
        num_assistant_tokens_schedule="constant",
    )
    assert out.stats.summary().acceptance_rate > 0.9


def test_greedy_ignores_sampling_knobs(tiny_pair: tuple) -> None:
    target, draft = tiny_pair
    prompt = torch.tensor([[5, 6]])
    plain = dynaspec.generate(target, draft, prompt, max_new_tokens=6, eos_token_id=[])
    knobs = dynaspec.generate(
        target,
        draft,
        prompt,
        max_new_tokens=6,
        temperature=0.3,
        top_k=2,
        top_p=0.5,
        seed=3,
        eos_token_id=[],
    )
    assert plain.sequences.tolist() == knobs.sequences.tolist()


# ---------------------------------------------------------------------------------------
# TokenSampler
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "temperature,top_k,top_p", [(1.0, None, None), (0.5, None, None), (1.0, 2, None), (0.8, 3, 0.6)]
)
def test_token_sampler_matches_transformers_processing(
    temperature: float, top_k: int | None, top_p: float | None
) -> None:
    config = SamplingConfig(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
    logits = torch.tensor([[2.0, 0.5, -1.0, 1.5, 0.0]])
    probs = TokenSampler(config).probs(logits)
    assert probs.dtype == torch.float32
    expected = processed(logits[0], config)
    assert torch.allclose(probs[0].double(), expected, atol=1e-6)


def test_token_sampler_top_k_and_top_p_zero_out_tokens() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top_k = TokenSampler(SamplingConfig(do_sample=True, top_k=2)).probs(logits)[0]
    assert top_k.tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0])
    top_p = TokenSampler(SamplingConfig(do_sample=True, top_p=0.8)).probs(logits)[0]
    assert top_p.tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0])


def test_token_sampler_greedy_picks_the_argmax() -> None:
    sampler = TokenSampler(SamplingConfig(do_sample=False, temperature=0.1, top_k=1))
    logits = torch.tensor([0.1, 3.0, 2.9])
    assert int(sampler.pick(logits, sampler.probs(logits[None])[0])) == 1
    assert not sampler.processors and sampler.generator("cpu") is None


# ---------------------------------------------------------------------------------------
# verify.greedy_accept
# ---------------------------------------------------------------------------------------


def one_hot_logits(tokens: list[int], vocab_size: int = 6) -> torch.Tensor:
    """(len(tokens), V) logits whose argmax per row is the given token."""
    logits = torch.zeros(len(tokens), vocab_size)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return logits


@pytest.mark.parametrize(
    "draft,target_argmax,expected",
    [
        ([1, 2, 3], [1, 2, 0, 5], (2, 0)),  # some accepted, then the target's token
        ([1, 2, 3], [1, 2, 3, 5], (3, 5)),  # all accepted, plus the bonus token
        ([1, 2, 3], [4, 2, 3, 5], (0, 4)),  # none accepted
        ([1, 2, 3], [1, 0, 3, 5], (1, 0)),  # a later match after a mismatch does not count
        ([], [2], (0, 2)),  # nothing drafted: the target's own next token
    ],
)
def test_greedy_accept(draft: list[int], target_argmax: list[int], expected: tuple) -> None:
    num_accepted, next_token = greedy_accept(
        torch.tensor(draft, dtype=torch.long), one_hot_logits(target_argmax)
    )
    assert (num_accepted, int(next_token)) == expected
    assert next_token.dim() == 0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_argmax_is_the_first_of_equal_maxima_in_every_dtype(dtype: torch.dtype) -> None:
    """16-bit scores are widened before the argmax (faster on a CPU): the same index as
    torch's own argmax in that dtype, ties to the first, row by row."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(5, 1000, generator=generator).to(dtype)
    scores[1, 7] = scores[1, 900] = 9.0  # a tie: the first wins
    scores[2, 999] = 9.5
    widened = argmax(scores)
    assert torch.equal(widened, scores.argmax(-1))
    assert widened[1] == 7 and widened[2] == 999
    assert int(argmax(scores[3])) == int(scores[3].argmax())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), None])
def test_all_finite_sees_any_nan_or_inf(dtype: torch.dtype, bad: float | None) -> None:
    logits = torch.randn(3, 151936).to(dtype) * 30
    if bad is not None:
        logits[2, 123456] = bad
    assert bool(all_finite(logits)) == (bad is None)
    assert bool(all_finite(logits[0])) is True
    floor = torch.full((151936,), torch.finfo(dtype).min, dtype=dtype)  # a replayed draft's
    floor[7] = 0.0
    assert bool(all_finite(floor)) is True  # finite, however far from the rest


# ---------------------------------------------------------------------------------------
# verify.speculative_sample
# ---------------------------------------------------------------------------------------


class Recorder:
    """Deterministic stand-ins for the random draws: fixed uniforms; records sampled rows."""

    def __init__(self, uniforms: list[float]) -> None:
        self.uniforms = uniforms
        self.sampled: list[torch.Tensor] = []

    def uniform(self, n: int) -> torch.Tensor:
        return torch.tensor(self.uniforms[:n])

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        self.sampled.append(probs.clone())
        return probs.argmax()


def spec(draft_tokens: list[int], draft_probs, target_probs, uniforms: list[float]):  # noqa: ANN001, ANN201
    recorder = Recorder(uniforms)
    num_accepted, token = speculative_sample(
        torch.tensor(draft_tokens, dtype=torch.long),
        torch.tensor(draft_probs, dtype=torch.float32).reshape(len(draft_tokens), -1),
        torch.tensor(target_probs, dtype=torch.float32),
        recorder.uniform,
        recorder.sample,
    )
    return num_accepted, int(token), recorder


def test_spec_accepts_with_probability_min_one_ratio() -> None:
    draft_probs = [[0.2, 0.8]]  # drafted token 1 with p_d = 0.8
    target_probs = [[0.6, 0.4], [0.5, 0.5]]  # p_t(1) = 0.4: accept iff u < 0.5
    assert spec([1], draft_probs, target_probs, [0.49])[0] == 1
    assert spec([1], draft_probs, target_probs, [0.51])[0] == 0


def test_spec_rejection_samples_the_normalised_residual() -> None:
    draft_probs = [[0.1, 0.6, 0.3]]
    target_probs = [[0.4, 0.2, 0.4], [1.0, 0.0, 0.0]]
    num_accepted, _, recorder = spec([1], draft_probs, target_probs, [0.9])
    assert num_accepted == 0
    # max(0, p_t - p_d) = [0.3, 0, 0.1], normalised
    assert recorder.sampled[0].tolist() == pytest.approx([0.75, 0.0, 0.25])


def test_spec_all_accepted_samples_the_extra_token_from_the_target() -> None:
    draft_probs = [[0.5, 0.5], [0.5, 0.5]]
    target_probs = [[0.5, 0.5], [0.4, 0.6], [0.9, 0.1]]
    num_accepted, token, recorder = spec([0, 1], draft_probs, target_probs, [0.99, 0.5])
    assert (num_accepted, token) == (2, 0)
    assert recorder.sampled[0].tolist() == pytest.approx([0.9, 0.1])


def test_spec_rejects_a_token_the_target_never_produces() -> None:
    """Even for u == 0 exactly (torch.rand can return 0): p_t = 0 must always reject."""
    num_accepted, token, _ = spec([1], [[0.5, 0.5]], [[1.0, 0.0], [0.0, 1.0]], [0.0])
    assert (num_accepted, token) == (0, 0)


def test_spec_stops_at_the_first_rejection() -> None:
    draft_probs = [[0.5, 0.5, 0.0]] * 3
    target_probs = [[0.5, 0.5, 0.0], [0.9, 0.1, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]]
    # token 1 at index 1 has ratio 0.2: u=0.5 rejects there; index 2 would accept.
    num_accepted, token, recorder = spec([0, 1, 0], draft_probs, target_probs, [0.1, 0.5, 0.0])
    assert (num_accepted, token) == (1, 0)
    assert recorder.sampled[0].tolist() == pytest.approx([1.0, 0.0, 0.0])


def test_spec_nothing_drafted_samples_the_target() -> None:
    recorder = Recorder([])
    num_accepted, token = speculative_sample(
        torch.empty(0, dtype=torch.long),
        torch.empty(0, 3),
        torch.tensor([[0.1, 0.7, 0.2]]),
        recorder.uniform,
        recorder.sample,
    )
    assert (num_accepted, int(token)) == (0, 1)


def test_spec_equal_distributions_fall_back_to_the_target_when_residual_is_zero() -> None:
    """u * p_d > p_t cannot happen for equal rows, but rounding may produce a zero residual."""
    _, token, recorder = spec([0], [[0.6, 0.4]], [[0.6, 0.4], [0.0, 1.0]], [0.999])
    assert token == 1 and len(recorder.sampled) == 1  # accepted: bonus token from row 1


# Distributions over 4 tokens from integer weights (no denormals, which float32 flushes to 0).
probability_rows = (
    st.lists(st.integers(0, 100), min_size=4, max_size=4)
    .filter(lambda row: sum(row) > 0)
    .map(lambda row: [value / sum(row) for value in row])
)


@settings(max_examples=80, deadline=None)
@given(
    draft_row=probability_rows,
    target_row=probability_rows,
    token=st.integers(0, 3),
    uniform=st.floats(0.0, 0.999999),
)
def test_spec_single_token_matches_the_rule(
    draft_row: list[float], target_row: list[float], token: int, uniform: float
) -> None:
    """One drafted token: accept iff u < p_t/p_d; else sample norm(max(0, p_t - p_d))."""
    if draft_row[token] == 0.0:
        draft_row = [0.5 * value for value in draft_row]
        draft_row[token] += 0.5
    ratio = target_row[token] / draft_row[token]
    if abs(uniform - ratio) < 1e-5:  # float32 rounding decides right at the boundary
        return
    num_accepted, _, recorder = spec([token], [draft_row], [target_row, [1, 0, 0, 0]], [uniform])
    assert num_accepted == (1 if uniform < ratio else 0)
    if num_accepted == 0:
        residual = torch.tensor(target_row) - torch.tensor(draft_row)
        residual = residual.clamp_min(0)
        expected = residual / residual.sum() if residual.sum() > 0 else torch.tensor(target_row)
        assert torch.allclose(recorder.sampled[0], expected.float(), atol=1e-5)
