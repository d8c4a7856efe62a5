"""Keyed sampling (core/keyed.py): one seed, one text, whatever drafts it.

The noise is a function of (seed, position, token id) alone; the keyed sample follows the
processed distribution (chi-square, with a broken coupling as the control that fails); and
a seeded speculative run equals the target alone's with the same seed token for token, for
every draft source and schedule, on fp32 tiny models.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
import torch
from scipy.stats import chisquare
from test_sampling import (
    ALPHA,
    PROMPT,
    chi_square_pvalue,
    exact_distribution,
    processed,
    scripted_pair,
)
from tiny_models import CUDA, noisy_copy, tiny_model

import dynaspec
from dynaspec.compat.records import SamplingConfig
from dynaspec.core import keyed
from dynaspec.core import loop as decoding
from dynaspec.core.config import LimitsConfig
from dynaspec.core.loop import decode
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters import ModelDrafter
from dynaspec.errors import ConfigError, NumericalError, UnsupportedOptionError
from dynaspec.policies import ConstantPolicy, DynamicPolicy

VOCAB_SIZE = 64


# ---- the noise --------------------------------------------------------------------------


def test_the_hash_wraps_as_exact_32_bit_arithmetic() -> None:
    """torch's int32 products wrap; the hash equals its exact-integer reference."""
    draws = random.Random(0)
    words = [draws.getrandbits(32) for _ in range(2000)] + [0, 1, 2**31 - 1, 2**31, 2**32 - 1]
    hashed = keyed.mix(keyed._as_words(torch.tensor(words)))
    assert [w % 2**32 for w in hashed.tolist()] == [keyed.reference_mix(w) for w in words]


def test_the_noise_depends_only_on_seed_position_and_token() -> None:
    """A row of noise is the same whether made alone, among other positions (in any order),
    or for a few token ids; another seed or position changes it."""
    together = keyed.gumbel_noise(7, torch.tensor([40, 3, 12]), VOCAB_SIZE, "cpu")  # (3, V)
    for row, position in enumerate((40, 3, 12)):
        alone = keyed.gumbel_noise(7, torch.tensor([position]), VOCAB_SIZE, "cpu")[0]
        assert torch.equal(together[row], alone)
    ids = torch.tensor([5, 0, 63])
    picked = keyed.gumbel(7, torch.tensor([12, 12, 12]), ids)  # (3,) pairs
    assert torch.equal(picked, together[2, ids])
    assert not torch.equal(keyed.gumbel_noise(8, torch.tensor([40]), VOCAB_SIZE, "cpu")[0],
                           together[0])  # fmt: skip
    assert len(set(together[0].tolist())) == VOCAB_SIZE  # no two tokens share a value


def test_the_uniforms_are_uniform_and_never_zero_or_one() -> None:
    values = keyed.uniforms(3, torch.arange(50).view(-1, 1), torch.arange(4000))  # (50, 4000)
    assert float(values.min()) > 0.0 and float(values.max()) < 1.0
    counts = torch.histc(values.float(), bins=20, min=0.0, max=1.0)
    assert chisquare(counts.numpy()).pvalue > ALPHA


def test_large_and_negative_seeds_are_keys_of_their_own() -> None:
    seeds = (0, 1, -1, 2**32, 2**63 - 1, -(2**63), 2**64 - 1)
    rows = [keyed.gumbel_noise(s, torch.tensor([0]), VOCAB_SIZE, "cpu")[0] for s in seeds]
    assert len({tuple(row.tolist()) for row in rows}) == len(seeds) - 1  # -1 == 2**64 - 1


def test_masked_tokens_never_win_and_the_sparse_path_equals_the_dense_one() -> None:
    scores = torch.randn(200, VOCAB_SIZE)
    scores[:, 3:] = float("-inf")  # three tokens allowed: the CPU's sparse path
    sparse = keyed.keyed_tokens(scores, 11, 5)
    noise = keyed.gumbel_noise(11, torch.arange(5, 205), VOCAB_SIZE, "cpu")
    assert torch.equal(sparse, (scores + noise).argmax(-1))
    assert int(sparse.max()) < 3 and len(set(sparse.tolist())) == 3


def test_cached_noise_rows_are_the_rows_made_afresh() -> None:
    cache = keyed.NoiseRows(4)
    first = cache.get(10, 3, VOCAB_SIZE, torch.device("cpu"))
    again = cache.get(11, 4, VOCAB_SIZE, torch.device("cpu"))  # two cached, two new
    assert torch.equal(again[:2], first[1:])
    assert torch.equal(again, keyed.gumbel_noise(4, torch.arange(11, 15), VOCAB_SIZE, "cpu"))
    scores = torch.randn(4, VOCAB_SIZE)
    assert torch.equal(keyed.keyed_tokens(scores, 4, 11, cache), keyed.keyed_tokens(scores, 4, 11))


def test_keyed_samples_follow_the_processed_distribution() -> None:
    """One position per draw: the keyed samples of fixed logits under temperature, top-k and
    top-p follow transformers' processed distribution; the raw logits' would not."""
    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -1.0, -3.0, -5.0])
    config = SamplingConfig(do_sample=True, temperature=0.8, top_k=6, top_p=0.95, seed=0)
    sampler = TokenSampler(config)
    scores = sampler.process(logits.expand(6000, -1))  # (6000, 8)
    tokens = keyed.keyed_tokens(scores, 21, 0)
    expected = processed(logits, config).float() * tokens.numel()
    observed = torch.bincount(tokens, minlength=logits.numel()).float()
    support = expected > 0
    assert not bool(observed[~support].any()), "a token the warpers removed was sampled"
    assert chisquare(observed[support].numpy(), expected[support].numpy()).pvalue > ALPHA
    raw = torch.softmax(logits, -1)[support] * tokens.numel()
    raw = raw * expected[support].sum() / raw.sum()
    assert chisquare(observed[support].numpy(), raw.numpy()).pvalue < ALPHA


# ---- coupling in the loop: the distribution -------------------------------------------------


def keyed_sequences(length: int, runs: int, drafting: bool, **sampling: Any) -> Counter:
    """Counts of the `length` new tokens of the scripted pair over `runs` seeds (each run
    its own seed: a seed fixes the text)."""
    target, draft = scripted_pair()
    counts: Counter = Counter()
    with torch.inference_mode():
        for seed in range(runs):
            config = SamplingConfig(do_sample=True, seed=seed, seed_mode="keyed", **sampling)
            sampler = TokenSampler(config)
            drafter = ModelDrafter(draft) if drafting else None
            out = decode(target, drafter, torch.tensor([PROMPT]), ConstantPolicy(3), sampler,
                         LimitsConfig(max_new_tokens=length))  # fmt: skip
            counts[tuple(out.sequences[0, len(PROMPT) :].tolist())] += 1
    return counts


@pytest.mark.parametrize("drafting", [True, False], ids=["coupled", "alone"])
def test_coupled_sequences_follow_the_target(drafting: bool) -> None:
    counts = keyed_sequences(3, 1500, drafting)
    config = SamplingConfig(do_sample=True, seed=0)
    assert chi_square_pvalue(counts, exact_distribution(3, config)) > ALPHA


def test_a_broken_coupling_fails_the_same_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: keeping every drafted token makes the output follow the draft."""

    def accept_all(draft_tokens: torch.Tensor, target_tokens: torch.Tensor) -> Any:
        return draft_tokens.numel(), target_tokens[draft_tokens.numel()]

    monkeypatch.setattr(decoding, "coupled_accept", accept_all)
    counts = keyed_sequences(3, 1500, drafting=True)
    config = SamplingConfig(do_sample=True, seed=0)
    assert chi_square_pvalue(counts, exact_distribution(3, config)) < ALPHA


def test_the_draft_proposes_with_the_same_keys() -> None:
    """The scripted draft and target: a drafted token equals the target's keyed sample far
    more often than independent draws would (coupling), and the loop accepts exactly those."""
    target, draft = scripted_pair()
    accepted = drafted = 0
    with torch.inference_mode():
        for seed in range(300):
            sampler = TokenSampler(SamplingConfig(do_sample=True, seed=seed, seed_mode="keyed"))
            policy, limits = DynamicPolicy(3, 0.0), LimitsConfig(max_new_tokens=6)
            out = decode(target, ModelDrafter(draft), torch.tensor([PROMPT]), policy, sampler,
                         limits)  # fmt: skip
            accepted += sum(r.num_accepted for r in out.stats.rounds)
            drafted += sum(r.num_drafted for r in out.stats.rounds)
    assert 0 < accepted < drafted


# ---- coupling through generate(): the target alone's text -----------------------------------

SAMPLING = [
    {"temperature": 1.5},
    {"temperature": 1.2, "top_k": 8, "top_p": 0.9},
    {"temperature": 2.0, "min_p": 0.05, "repetition_penalty": 1.3},
    {"temperature": 1.5, "typical_p": 0.9, "no_repeat_ngram_size": 3},
]
SCHEDULES = [
    {"num_assistant_tokens_schedule": "constant", "num_assistant_tokens": 3},
    {"num_assistant_tokens_schedule": "heuristic", "num_assistant_tokens": 2},
    {"num_assistant_tokens_schedule": "dynamic", "assistant_confidence_threshold": 0.3},
    {"num_assistant_tokens_schedule": "adaptive"},
]
SOURCES = ["model", "lookup", "hybrid", "same"]


def pair() -> tuple[Any, Any]:
    target = tiny_model("llama", vocab_size=VOCAB_SIZE)
    return target, noisy_copy(target, scale=0.3, seed=1)


def prompts() -> list[torch.Tensor]:
    rows = [[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], [7, 9, 7, 9, 7], [30]]
    return [torch.tensor([row]) for row in rows]


def draft_for(source: str, target: Any, draft: Any) -> tuple[Any, dict[str, Any]]:
    lookup = {"prompt_lookup_num_tokens": 4}
    return {
        "model": (draft, {}),
        "lookup": (None, lookup),
        "hybrid": (draft, lookup),
        "same": (target, {}),
    }[source]


@pytest.mark.parametrize("source", SOURCES)
def test_seeded_output_equals_the_target_alone_for_every_source_and_schedule(source: str) -> None:
    target, noisy = pair()
    draft, extra = draft_for(source, target, noisy)
    accepted = rejected = 0
    for case, (sampling, schedule) in enumerate(
        (s, d) for s in SAMPLING for d in SCHEDULES
    ):  # fmt: skip
        prompt = prompts()[case % 3]
        kwargs = {"do_sample": True, "max_new_tokens": 20, "seed": 100 + case, **sampling}
        alone = dynaspec.generate(target, None, prompt, **kwargs)
        out = dynaspec.generate(target, draft, prompt, **kwargs, **schedule, **extra)
        assert out.sequences.tolist() == alone.sequences.tolist(), (sampling, schedule)
        rounds = out.stats.rounds
        accepted += sum(r.num_accepted for r in rounds)
        rejected += sum(r.num_drafted - r.num_accepted for r in rounds)
    assert accepted > 0  # drafts were kept...
    if source != "same":
        assert rejected > 0  # ...and replaced: both branches of the coupling ran


def test_seeded_runs_repeat_and_different_seeds_differ() -> None:
    target, draft = pair()
    prompt = prompts()[2]
    kwargs = {"do_sample": True, "temperature": 2.0, "max_new_tokens": 24}
    runs = [dynaspec.generate(target, draft, prompt, seed=seed, **kwargs) for seed in (1, 1, 2)]
    assert runs[0].sequences.tolist() == runs[1].sequences.tolist()
    assert runs[0].sequences.tolist() != runs[2].sequences.tolist()


def test_stream_mode_keeps_rejection_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """seed_mode="stream": the seeded generator and rejection sampling, as before."""
    target, draft = pair()
    called = []
    monkeypatch.setattr(decoding, "coupled_accept", lambda *a: called.append(a))
    kwargs = {"do_sample": True, "max_new_tokens": 6, "seed": 3, "seed_mode": "stream"}
    first = dynaspec.generate(target, draft, prompts()[0], **kwargs)
    again = dynaspec.generate(target, draft, prompts()[0], **kwargs)
    assert first.sequences.tolist() == again.sequences.tolist() and not called


def test_an_unknown_seed_mode_and_a_nan_distribution_are_typed_errors() -> None:
    with pytest.raises(ConfigError, match="seed_mode must be one of 'keyed', 'stream'"):
        SamplingConfig(do_sample=True, seed=1, seed_mode="keys")
    sampler = TokenSampler(SamplingConfig(do_sample=True, seed=1, seed_mode="keyed"))
    with pytest.raises(NumericalError, match="NaN, inf"):
        sampler.keyed(torch.full((1, 4), float("nan")), 3)
    with pytest.raises(NumericalError):
        sampler.keyed(torch.full((1, 4), float("-inf")), 3)


# ---- batches and the server: each row its own seed --------------------------------------


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (B, T) input_ids and their attention mask."""
    width = max(len(row) for row in rows)
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


@pytest.mark.parametrize("source", ["model", "lookup", "hybrid"])
@pytest.mark.parametrize("schedule", SCHEDULES[:1] + SCHEDULES[2:], ids=["constant", "dynamic",
                                                                          "adaptive"])  # fmt: skip
def test_a_batch_row_samples_as_the_target_alone_with_seed_plus_row(
    source: str, schedule: dict[str, Any]
) -> None:
    """Row r of a left-padded batch with seed=s: the target alone's text with seed s + r."""
    target, noisy = pair()
    draft, extra = draft_for(source, target, noisy)
    rows = [[1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], [7, 9, 7]]
    ids, mask = padded(rows)
    kwargs = {"do_sample": True, "temperature": 1.5, "top_k": 20, "max_new_tokens": 16}
    out = dynaspec.generate(target, draft, ids, attention_mask=mask, seed=40, **kwargs,
                            **schedule, **extra)  # fmt: skip
    for index, row in enumerate(rows):
        alone = dynaspec.generate(target, None, torch.tensor([row]), seed=40 + index, **kwargs)
        new = alone.sequences[0, len(row) :].tolist()
        assert out.sequences[index, ids.shape[1] : ids.shape[1] + len(new)].tolist() == new


def test_a_seed_list_gives_each_row_its_seed_and_must_fit_the_batch() -> None:
    target, draft = pair()
    rows = [[5, 6], [30, 31]]
    ids, mask = padded(rows)
    kwargs = {"do_sample": True, "temperature": 1.5, "max_new_tokens": 12}
    out = dynaspec.generate(target, draft, ids, attention_mask=mask, seed=[9, 2], **kwargs)
    for index, seed in enumerate((9, 2)):
        alone = dynaspec.generate(target, None, torch.tensor([rows[index]]), seed=seed, **kwargs)
        assert out.sequences[index].tolist() == alone.sequences[0].tolist()
    with pytest.raises(ConfigError, match="lists 3 seeds, one per row, for 2 rows"):
        dynaspec.generate(target, draft, ids, attention_mask=mask, seed=[1, 2, 3], **kwargs)
    one = dynaspec.generate(target, draft, ids[:1], seed=[9], **kwargs)
    assert one.sequences.tolist() == out.sequences[:1].tolist()


def test_rows_joining_a_running_batch_sample_as_the_target_alone() -> None:
    """The server's batch (ContinuousBatch, the adaptive rule): rows join at different
    rounds, each with its own seed, and each gets the target alone's text."""
    from dynaspec.continuous import ContinuousBatch

    target, draft = pair()
    batch = ContinuousBatch(target, draft, prompt_lookup_num_tokens=4)
    prompts_ = [[1, 2, 3, 4, 1, 2, 3], [7, 9, 7, 9], [30], [12, 13]]
    settings = {"do_sample": True, "temperature": 1.5, "max_new_tokens": 14}
    pending = {index: index for index in range(len(prompts_))}  # joins before round `index`
    got: dict[int, list[int]] = {}
    names: dict[int, int] = {}
    for step in range(100):
        for index, when in pending.items():
            if when == step:
                row = batch.make_row(prompts_[index], dict(settings, seed=50 + index))
                names[id(row)] = index
                batch.join(row, prompts_[index])
        batch.step()
        for row in batch.leave(lambda row: row.done):
            got[names[id(row)]] = row.committed[row.start :].tolist()
        if len(got) == len(prompts_):
            break
    for index, prompt in enumerate(prompts_):
        alone = dynaspec.generate(target, None, torch.tensor([prompt]), seed=50 + index,
                                  **settings)  # fmt: skip
        assert got[index] == alone.sequences[0, len(prompt) :].tolist(), index


def test_concurrent_seeded_server_requests_get_the_target_alone_text() -> None:
    """Four clients at once against `dynaspec serve` (the adaptive rule, a batch of 3):
    each seeded request's text is the target alone's with its seed."""
    pytest.importorskip("fastapi")
    openai = pytest.importorskip("openai")
    from concurrent.futures import ThreadPoolExecutor

    from serve_helpers import alone_text, running_server

    from dynaspec.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair()
    prompts_ = ["def fib(n):", "x = [1, 2", "import os", "class Stack:"]
    settings = {"max_tokens": 16, "temperature": 1.0, "top_p": 0.9}

    def ask(url: str, index: int) -> str:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=60)
        reply = client.completions.create(
            model="tiny", prompt=prompts_[index], seed=index + 1, **settings
        )
        return reply.choices[0].text

    with (
        running_server(target, draft, tokenizer, max_batch=3) as (url, _),
        ThreadPoolExecutor(4) as pool,
    ):
        texts = list(pool.map(lambda index: ask(url, index), range(4)))
    assert all(texts) and len(set(texts)) == 4
    for index, text in enumerate(texts):
        expected = alone_text(target, None, tokenizer, prompts_[index], 16, do_sample=True,
                              temperature=1.0, top_p=0.9, seed=index + 1)  # fmt: skip
        assert text == expected, index


@pytest.mark.parametrize("gpu", [pytest.param("cuda", marks=CUDA)])
def test_the_noise_and_the_samples_are_the_same_on_a_gpu(gpu: str) -> None:
    """The integer hash is exact everywhere: the uniforms are bit-identical, the samples
    equal (the float64 Gumbel transform may differ in a last bit, never at these gaps)."""
    positions = torch.arange(0, 300, 7)
    ids = torch.arange(5000)
    on_cpu = keyed.uniforms(5, positions.view(-1, 1), ids)
    on_gpu = keyed.uniforms(5, positions.view(-1, 1).to(gpu), ids.to(gpu))
    assert torch.equal(on_cpu, on_gpu.cpu())
    scores = torch.randn(positions.numel(), 5000)
    scores[::2, 100:] = float("-inf")  # sparse rows too (the CPU takes its own path)
    assert torch.equal(keyed.keyed_tokens(scores, 5, 40),
                       keyed.keyed_tokens(scores.to(gpu), 5, 40).cpu())  # fmt: skip


def test_a_draft_with_another_tokenizer_keeps_the_target_alone_text() -> None:
    """Over the shared tokens (cross_tokenizer="intersection", chosen when sampling) the
    draft proposes target ids with the same keys; through text it drafts greedily only."""
    from test_cross_tokenizer import bytes_tokenizer, noisy_cross_pair, prompt_ids

    target, draft, permuted = noisy_cross_pair()
    ids = prompt_ids(bytes_tokenizer(), "Once upon")
    kwargs = {"do_sample": True, "temperature": 1.3, "top_k": 30, "max_new_tokens": 20}
    texts = {"tokenizer": bytes_tokenizer(), "assistant_tokenizer": permuted}
    accepted = 0
    for seed, schedule in enumerate(("constant", "dynamic", "adaptive")):
        alone = dynaspec.generate(target, None, ids, seed=seed, **kwargs)
        spec = {"num_assistant_tokens": 4, "num_assistant_tokens_schedule": schedule}
        out = dynaspec.generate(target, draft, ids, seed=seed, **spec, **texts, **kwargs)
        assert out.sequences.tolist() == alone.sequences.tolist(), schedule
        accepted += sum(r.num_accepted for r in out.stats.rounds)
    assert accepted > 0
    with pytest.raises(UnsupportedOptionError, match="greedy|do_sample=False"):
        dynaspec.generate(target, draft, ids, seed=0, cross_tokenizer="string", **texts, **kwargs)


def test_a_batch_row_drafted_by_another_tokenizer_drafts_as_alone() -> None:
    """In a left-padded batch the other-tokenizer draft sees its row without padding, and
    proposes with the keys of the row's own positions: the same rounds as the row alone."""
    from test_cross_tokenizer import bytes_tokenizer, permuted_copy, permuted_tokenizer

    permuted, to_base = permuted_tokenizer()
    target = tiny_model("llama", vocab_size=257, hidden_size=32)
    draft = permuted_copy(noisy_copy(target, scale=0.2, seed=2), to_base)
    rows = [[72, 101, 108, 108, 111, 32, 119], [65, 66]]
    ids, mask = padded(rows)
    kwargs = {"do_sample": True, "temperature": 1.3, "max_new_tokens": 12, "seed": [4, 8],
              "num_assistant_tokens": 3, "num_assistant_tokens_schedule": "constant",
              "tokenizer": bytes_tokenizer(), "assistant_tokenizer": permuted}  # fmt: skip
    out = dynaspec.generate(target, draft, ids, attention_mask=mask, **kwargs)
    sampling = {"do_sample": True, "temperature": 1.3, "max_new_tokens": 12}
    for index, row in enumerate(rows):
        alone = dynaspec.generate(target, draft, torch.tensor([row]),
                                  **{**kwargs, "seed": kwargs["seed"][index]})  # fmt: skip
        new = alone.sequences[0, len(row) :].tolist()
        assert out.sequences[index, ids.shape[1] : ids.shape[1] + len(new)].tolist() == new
        assert [(r.num_drafted, r.num_accepted) for r in out.row_stats[index].rounds] == [
            (r.num_drafted, r.num_accepted) for r in alone.stats.rounds
        ]
        target_alone = dynaspec.generate(target, None, torch.tensor([row]),
                                         seed=kwargs["seed"][index], **sampling)  # fmt: skip
        assert new == target_alone.sequences[0, len(row) :].tolist()
    assert sum(r.num_accepted for stats in out.row_stats for r in stats.rounds) > 0


def test_the_hybrid_with_another_tokenizer_keeps_the_target_alone_text() -> None:
    """Prompt lookup with a draft of another tokenizer (the hybrid), alone and in a batch of
    2 (each row its seed): every text is the target alone's with that seed."""
    from test_cross_tokenizer import bytes_tokenizer, noisy_cross_pair, prompt_ids

    target, draft, permuted = noisy_cross_pair()
    rows = [prompt_ids(bytes_tokenizer(), text)[0].tolist() for text in ("abcabcabc", "Once")]
    sampling = {"do_sample": True, "temperature": 0.9, "top_p": 0.9, "max_new_tokens": 16}
    spec = {"num_assistant_tokens": 4, "num_assistant_tokens_schedule": "constant",
            "prompt_lookup_num_tokens": 8, "tokenizer": bytes_tokenizer(),
            "assistant_tokenizer": permuted}  # fmt: skip
    expected = [
        dynaspec.generate(target, None, torch.tensor([row]), seed=seed, **sampling)
        .sequences[0, len(row) :]
        .tolist()
        for row, seed in zip(rows, (3, 5), strict=True)
    ]
    for row, seed, new in zip(rows, (3, 5), expected, strict=True):
        out = dynaspec.generate(target, draft, torch.tensor([row]), seed=seed, **spec, **sampling)
        assert out.sequences[0, len(row) :].tolist() == new
    ids, mask = padded(rows)
    out = dynaspec.generate(target, draft, ids, attention_mask=mask, seed=[3, 5], **spec,
                            **sampling)  # fmt: skip
    for index, new in enumerate(expected):
        assert out.sequences[index, ids.shape[1] : ids.shape[1] + len(new)].tolist() == new
