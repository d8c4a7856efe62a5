"""Bit-exact decoding on the fast path (issue 66): dynaspec's bf16 kernel
(backends/kernels/bf16.py, csrc/bf16_matmul.cpp) computes the product, and each row of an
M-row call is bitwise the one-row call; the static decoder's whole forward gives a token the
same logits whether it is fed alone or with up to 32 others (bf16 and every quantized
format), the first forward (the prompt with drafted tokens) included; so greedy speculative
output equals the same adapter's target alone token for token in bf16, for every draft
source and schedule, on a model whose ties the old kernels broke (they fail with oneDNN's
prepacked layers in the kernel's place: `bf16.KERNEL.supports` patched to False)."""

from __future__ import annotations

import dataclasses
import functools
import types

import pytest
import torch
from tiny_models import noisy_copy, random_prompts, tiny_model

import dynaspec
from dynaspec import compare
from dynaspec.backends import decoder, exact_linear
from dynaspec.backends.exact_linear import BitExactLinear
from dynaspec.backends.kernels import bf16
from dynaspec.backends.kernels.attention import KERNEL as ATTENTION
from dynaspec.backends.quant import PackedLinear
from dynaspec.backends.static import make_fast
from dynaspec.policies import SCHEDULES

needs_kernels = pytest.mark.skipif(
    not (bf16.KERNEL.available() and ATTENTION.available()),
    reason=f"bf16 kernel: {bf16.KERNEL.unavailable_reason()}; "
    f"attention kernel: {ATTENTION.unavailable_reason()}",
)

# Rows of a step or a verification (prompt lookup's 32 drafted tokens and the newest), then
# a few more: blocks of 6 rows, a short last block, a prefill-sized call.
ROW_COUNTS = (*range(1, 34), 47, 64, 100)
# The widths at which oneDNN's bf16 product (the old kernel) sums a row in an order that
# depends on the row count on the AVX512-BF16 EPYC: K = 1536 (at 1024 it does not).
HIDDEN = 1536


def _problem(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator).to(torch.bfloat16)
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(tokens, columns, generator=generator).to(torch.bfloat16)
    return weight, bias, x


@needs_kernels
@pytest.mark.parametrize("rows,columns", [(64, 2), (128, 130), (192, 1536)])
@pytest.mark.parametrize("tokens", [1, 5, 9])  # in registers; in registers; by blocks
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_computes_the_product(rows, columns, tokens, with_bias) -> None:
    weight, bias, x = _problem(rows, columns, tokens)
    bias = bias if with_bias else None
    tiled = bf16.KERNEL.tiled(weight)
    out = bf16.KERNEL.matmul(x, tiled, bias, out_dtype=torch.float32)
    expected = bf16.reference(x, weight, bias)
    assert out.shape == (tokens, rows) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4 * columns**0.5)
    rounded = bf16.KERNEL.matmul(x, tiled, bias)  # bf16: the float32 sums, rounded
    assert rounded.dtype == torch.bfloat16 and torch.equal(rounded, out.to(torch.bfloat16))


@needs_kernels
@pytest.mark.parametrize("columns", [2304, 300])  # blocks of 2048 columns, a short last one
def test_a_row_of_any_row_count_is_bitwise_the_one_row_product(columns) -> None:
    weight, bias, x = _problem(192, columns, tokens=max(ROW_COUNTS), seed=3)
    tiled = bf16.KERNEL.tiled(weight)
    singles = torch.cat([bf16.KERNEL.matmul(x[i : i + 1], tiled, bias) for i in range(100)])
    for count in ROW_COUNTS:
        assert torch.equal(bf16.KERNEL.matmul(x[:count], tiled, bias), singles[:count]), count
    # other rows beside it change nothing either
    shuffled = torch.randperm(40, generator=torch.Generator().manual_seed(1))
    assert torch.equal(bf16.KERNEL.matmul(x[shuffled], tiled, bias), singles[shuffled])


@needs_kernels
def test_the_thread_count_changes_no_bit() -> None:
    weight, bias, x = _problem(256, 1536, tokens=9, seed=4)
    tiled = bf16.KERNEL.tiled(weight)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = bf16.KERNEL.matmul(x, tiled, bias)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, bf16.KERNEL.matmul(x, tiled, bias))


def test_the_tiled_layout_pairs_columns_of_sixty_four_rows() -> None:
    weight = torch.arange(128 * 6, dtype=torch.float32).view(128, 6).to(torch.bfloat16)
    tiled = bf16.KERNEL.tiled(weight)
    assert tiled.shape == (2, 3, 64, 2)
    # tile 1, column pair 2, row 5 of the tile: row 69, columns 4 and 5
    assert torch.equal(tiled[1, 2, 5], weight[69, 4:6])
    assert torch.equal(bf16.KERNEL.untiled(tiled), weight)
    assert bf16.KERNEL.fits(128, 6) and not bf16.KERNEL.fits(96, 6)
    assert not bf16.KERNEL.fits(128, 5)


@functools.cache
def _model(arch: str, hidden: int, initializer_range: float = 0.02) -> torch.nn.Module:
    """A one-layer bf16 model (12 heads of 128 at hidden 1536, as Qwen2.5-1.5B's, over 6
    key/value heads), vocabulary 256, with weights
    of a real model's spread (with tiny_model's default 0.5 each softmax is one-hot, and
    attention sums exactly in any order)."""
    return tiny_model(
        arch,
        vocab_size=256,
        hidden_size=hidden,
        num_layers=1,
        num_heads=max(2, hidden // 128),
        initializer_range=initializer_range,
        max_length=256,
    ).to(torch.bfloat16)


@needs_kernels
def test_bf16_static_layers_use_the_kernel_and_the_adapter_says_it_is_bit_exact() -> None:
    fast = make_fast(_model("qwen2", 256), static=True)
    layers = [m for m in fast.decoder.modules() if isinstance(m, (BitExactLinear, PackedLinear))]
    assert len(layers) == 8 and all(isinstance(m, BitExactLinear) for m in layers)  # 7 + head
    q_proj = fast.decoder.blocks[0].self_attn.q_proj
    original = _model("qwen2", 256).model.layers[0].self_attn.q_proj
    assert torch.equal(q_proj.dense_weight(), original.weight)
    assert fast.bit_exact
    assert not make_fast(tiny_model("qwen2", vocab_size=64), static=True).bit_exact  # float32
    assert not make_fast(_model("qwen2", 256), compile=True).bit_exact


@needs_kernels
def test_without_the_kernel_bf16_layers_stay_prepacked_and_not_bit_exact(monkeypatch) -> None:
    monkeypatch.setattr(bf16.KERNEL, "supports", lambda out_features, in_features: False)
    assert not exact_linear.fits(torch.nn.Linear(64, 64).to(torch.bfloat16))
    fast = make_fast(_model("qwen2", 256), static=True)
    assert isinstance(fast.decoder.blocks[0].gate_proj, PackedLinear)
    assert not fast.bit_exact


@needs_kernels
@pytest.mark.parametrize("heads,kv_heads,dim", [(12, 2, 128), (24, 12, 64)])
def test_attention_past_the_prefill_gives_a_query_the_same_bits_in_any_forward(
    heads, kv_heads, dim
) -> None:
    """(12, 2, 128): Qwen2.5-1.5B's heads. The old rule (attention_kernel up to 4 queries,
    grouped_attention's bf16 matmuls beyond; prefill=None) fails here from 15 and 5 queries
    on the AVX512-BF16 EPYC."""
    generator = torch.Generator().manual_seed(0)
    keys, values = (
        torch.randn(1, kv_heads, 128, dim, generator=generator).to(torch.bfloat16) for _ in range(2)
    )
    query = torch.randn(1, heads, 33, dim, generator=generator).to(torch.bfloat16)
    start = 40  # the queries' slots are 40 .. 72
    none = decoder.Prefill(0, 0)

    def attend(first: int, count: int) -> torch.Tensor:
        slots = torch.arange(start + first, start + first + count)
        mask = (torch.arange(128) <= slots[:, None])[None]  # (1, count, 128)
        return decoder.attention(query[:, :, first : first + count], keys, values, mask, 0.1, none)

    singles = torch.cat([attend(i, 1) for i in range(33)], dim=1)
    for count in range(1, 34):
        assert torch.equal(attend(0, count), singles[:, :count]), count


def _forward_rows(fast, prompt: torch.Tensor, tokens: torch.Tensor) -> list[int]:
    """Row counts M (1..33) for which feeding tokens[:M] after the prompt in one forward does
    not give the logits of feeding them one at a time, and, marked by -M, those for which the
    first forward (the prompt with the M tokens) does not."""
    length = prompt.shape[1]
    fast.begin(prompt, max_length=96)
    first = fast.forward(prompt[0], 1)
    singles = torch.cat([first, *(fast.forward(tokens[i : i + 1], 1) for i in range(33))])
    wrong = []
    for count in range(1, 34):
        fast.crop(length)
        if not torch.equal(fast.forward(tokens[:count], count), singles[1 : count + 1]):
            wrong.append(count)
    for count in (1, 6, 17, 33):
        fast.begin(prompt, max_length=96)
        together = fast.forward(torch.cat([prompt[0], tokens[:count]]), count + 1)
        if not torch.equal(together, singles[: count + 1]):
            wrong.append(-count)
    return wrong


@needs_kernels
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_bf16_static_forward_gives_each_token_the_logits_of_its_step(arch) -> None:
    """At hidden 1536 oneDNN's product sums a row in another order for 2 rows or more: with
    its prepacked layers in the kernel's place this fails for every row count from 2."""
    fast = make_fast(_model(arch, HIDDEN), static=True)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, 256, (1, 12), generator=generator)
    assert _forward_rows(fast, prompt, torch.randint(0, 256, (33,), generator=generator)) == []


@needs_kernels
@pytest.mark.parametrize("quantize", ["int8", "w8a8", "w4a8"])
def test_a_quantized_static_forward_gives_each_token_the_logits_of_its_step(quantize) -> None:
    fast = make_fast(_model("llama", HIDDEN), quantize=quantize)
    generator = torch.Generator().manual_seed(2)
    prompt = torch.randint(0, 256, (1, 12), generator=generator)
    assert _forward_rows(fast, prompt, torch.randint(0, 256, (33,), generator=generator)) == []
    assert fast.bit_exact


@functools.cache
def _tie_pair() -> tuple[object, object]:
    """A static bf16 target whose logits are flat (small initial weights: near-ties between
    its two best tokens are common) and a static noisy copy of it as its draft."""
    model = tiny_model(
        "qwen2",
        vocab_size=256,
        hidden_size=HIDDEN,
        num_layers=1,
        num_heads=HIDDEN // 64,
        initializer_range=0.005,
        max_length=256,
    )
    draft = noisy_copy(model, scale=0.05, seed=1).to(torch.bfloat16)
    return make_fast(model.to(torch.bfloat16), static=True), make_fast(draft, static=True)


@functools.cache
def _alone(prompt_key: tuple[int, ...]) -> torch.Tensor:
    target, _ = _tie_pair()
    prompt = torch.tensor([prompt_key])
    return dynaspec.generate(target, None, prompt, max_new_tokens=24).sequences


def _tie_prompts() -> list[torch.Tensor]:
    """Six prompts, each a random run said twice (so prompt lookup copies)."""
    return [torch.cat([p, p], 1) for p in random_prompts(6, 256, min_len=4, max_len=12, seed=5)]


@needs_kernels
@pytest.mark.parametrize("source", ["draft", "lookup", "hybrid", "suffix"])
@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
def test_greedy_speculative_output_is_the_bf16_target_alone_token_for_token(source, schedule):
    """With oneDNN's prepacked layers in the kernel's place one of these prompts parts at a
    tie in 18 of these 20 cases (not with the adaptive rule's draft model alone or prompt
    lookup alone)."""
    target, draft = _tie_pair()
    options = {"num_assistant_tokens": 8, "num_assistant_tokens_schedule": schedule}
    if source in ("lookup", "hybrid"):
        options["prompt_lookup_num_tokens"] = 16
    if source == "suffix":  # copies from the earlier outputs: each prompt's second call
        options["suffix_cache"] = dynaspec.SuffixCache()
    model = draft if source in ("draft", "hybrid") else None
    for prompt in _tie_prompts():
        for _ in range(2 if source == "suffix" else 1):
            out = dynaspec.generate(target, model, prompt, max_new_tokens=24, **options)
            assert torch.equal(out.sequences, _alone(tuple(prompt[0].tolist())))


@needs_kernels
def test_compare_says_the_outputs_are_identical_and_why() -> None:
    target, draft = _tie_pair()
    prompt = _tie_prompts()[0]
    options = {"max_new_tokens": 24, "prompt_lookup_num_tokens": 16}
    speculative = dynaspec.generate(target, draft, prompt, **options)
    lines = compare.compare_with_target_alone(target, prompt, speculative, options)
    assert lines.startswith("[target alone, static KV cache + bit-exact bf16 weights] ")
    assert lines.endswith(f"; outputs identical ({compare.BIT_EXACT_WHY})")
    # a divergence on a bit-exact target is a bug, even where the top two logits tie
    tie = types.SimpleNamespace(kind="tie", position=3, dtype="bfloat16", steps=0.5)
    said = compare.describe_divergence(tie, bit_exact=True)
    assert said.startswith("DIFFERENT from new token 3 on") and "Please report" in said
    assert "not a bug" in compare.describe_divergence(tie)


@needs_kernels
def test_a_divergence_from_a_bit_exact_target_is_a_bug_even_at_a_tie(monkeypatch) -> None:
    """`dynaspec bench`, the load test and --compare classify with classify_mismatch."""
    from dynaspec import mismatch

    target, _ = _tie_pair()
    prompt = _tie_prompts()[0]
    alone = _alone(tuple(prompt[0].tolist()))[0, prompt.shape[1] :].tolist()
    other = [*alone[:3], (alone[3] + 1) % 256, *alone[4:]]
    real = mismatch.classify_logits

    def as_a_tie(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), kind="tie")

    monkeypatch.setattr(mismatch, "classify_logits", as_a_tie)
    assert mismatch.classify_mismatch(target, prompt, alone, other).kind == "BUG"
    packed = make_fast(_model("qwen2", 256), compile=True)  # not bit-exact: a tie stays one
    assert not packed.bit_exact
