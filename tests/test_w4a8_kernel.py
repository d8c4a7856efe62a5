"""dynaspec's 4-bit x int8 matmul (backends/kernels/w4a8.py, `--quantize w4a8`): that it
computes its reference bit for bit, that the reference is the product of the dequantized
activations and 4-bit weights, that a row of a many-token product is bitwise the one-token
product, that `quantize="w4a8"` puts 4-bit layers on it and finer ones on the w8a8 kernel
(the same activations), and that a speculative w4a8 target gives its own output token for
token."""

from __future__ import annotations

import pytest
import torch
from tiny_models import assert_speculative_equals_alone, bf16_llama_pair, random_prompts
from torch import nn

from dynaspec.backends.kernels import int4_codes as int4_kernel
from dynaspec.backends.kernels.w4a8 import KERNEL as kernel
from dynaspec.backends.kernels.w8a8 import KERNEL as w8a8_kernel
from dynaspec.backends.quant import Int4Linear, Int8Linear, quantize_linear
from dynaspec.backends.static import make_fast
from dynaspec.errors import ConfigError

needs_kernel = pytest.mark.skipif(
    not kernel.available(), reason=f"w4a8 kernel: {kernel.unavailable_reason()}"
)


def _problem(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (rows, columns), dtype=torch.uint8, generator=generator)
    groups = (rows, columns // 32)
    scale = (torch.rand(groups, generator=generator) / 64).half()
    offset = (torch.randn(groups, generator=generator) / 64).half()
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(tokens, columns, generator=generator)
    x[0, 3] = 60.0  # an outlier: only its own group's scale grows
    if tokens > 2:
        x[2] = 0.0  # a row of zeros: output = bias
    return (codes, scale, offset), bias, x.to(torch.bfloat16)


@needs_kernel
@pytest.mark.parametrize("rows,columns", [(64, 128), (128, 1536), (192, 8960)])
@pytest.mark.parametrize("tokens", [1, 4, 9])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_computes_its_reference_bit_for_bit(rows, columns, tokens, with_bias) -> None:
    codes, bias, x = _problem(rows, columns, tokens)
    bias = bias if with_bias else None
    out = kernel.matmul(x, kernel.packed(*codes), 32, bias)
    assert out.shape == (tokens, rows) and out.dtype == torch.float32
    assert torch.equal(out, kernel.reference(x, *codes, bias))


def test_the_reference_is_the_product_of_the_dequantized_operands() -> None:
    codes, bias, x = _problem(64, 256, tokens=5, seed=1)
    a, a_scale = w8a8_kernel.quantize_activations(x)
    dequantized = (a.view(5, 2, 128) * a_scale[..., None]).view(5, 256)
    weights = int4_kernel.dequantize(*codes)
    expected = dequantized.double() @ weights.double().T + bias.double()
    out = kernel.reference(x, *codes, bias)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)


@needs_kernel
def test_a_row_of_many_tokens_is_bitwise_the_one_token_product() -> None:
    codes, bias, x = _problem(128, 256, tokens=53, seed=3)
    packed = kernel.packed(*codes)
    singles = torch.cat([kernel.matmul(x[i : i + 1], packed, 32, bias) for i in range(53)])
    for tokens in (*range(1, 32), 47, 48, 49, 53):
        many = kernel.matmul(x[:tokens], packed, 32, bias)
        assert torch.equal(many, singles[:tokens]), tokens


def test_the_layout_holds_nibble_pairs_of_column_quads_then_scales() -> None:
    codes, _, _ = _problem(64, 64, tokens=1)
    packed = kernel.packed(*codes)
    assert packed.shape == (1, 2, 1280) and packed.dtype == torch.uint8
    # group 1, quad pair 2, vector 3, row 5 of it (row 53), byte c = 1: columns 32 + 17, + 21
    byte = packed[0, 1, ((2 * 4 + 3) * 16 + 5) * 4 + 1]
    assert byte & 15 == codes[0][53, 49] and byte >> 4 == codes[0][53, 53]
    scales = packed[0, 1, 1024:].view(torch.float16)
    assert torch.equal(scales[:64], codes[1][:, 1]) and torch.equal(scales[64:], codes[2][:, 1])


@needs_kernel
def test_w4a8_puts_four_bit_layers_on_the_kernel_and_finer_ones_on_w8a8() -> None:
    torch.manual_seed(0)
    four_bit = nn.Linear(256, 128).to(torch.bfloat16)
    with torch.no_grad():  # weights on a 4-bit grid per 32 columns: kept in 4 bits
        four_bit.weight.copy_(int4_kernel.dequantize(*int4_kernel.quantize(four_bit.weight, 32)))
    layer = quantize_linear(four_bit, "w4a8")
    assert isinstance(layer, Int4Linear) and layer.kernel is kernel
    x = torch.randn(3, 256).to(torch.bfloat16)
    assert layer(x).dtype == torch.bfloat16 and layer(x).shape == (3, 128)
    fine = nn.Linear(256, 128).to(torch.bfloat16)  # gaussian weights: 4 bits lose too much
    layer = quantize_linear(fine, "w4a8")
    assert isinstance(layer, Int8Linear) and layer.kernel is w8a8_kernel


@needs_kernel
def test_a_w4a8_draft_puts_every_layer_in_4_bits_and_a_target_does_not() -> None:
    """A draft's precision changes only how often its tokens are accepted: every layer in 4
    bits; a target keeps the layers finer than 4 bits (the tiny model's gaussian ones) in 8."""

    def kinds(adapter) -> set[str]:
        return {type(m).__name__ for m in adapter.decoder.modules() if "Linear" in type(m).__name__}

    target, draft = bf16_llama_pair()
    fast_target = make_fast(target, quantize="w4a8")
    fast_draft = make_fast(draft, quantize="w4a8", draft=True)
    assert "Int8Linear" in kinds(fast_target)
    assert kinds(fast_draft) == {"Int4Linear"} and fast_draft.fast.int4_everywhere


def test_without_the_kernel_w4a8_says_why(monkeypatch) -> None:
    monkeypatch.setattr(kernel, "state", {"function": None, "reason": "switched off"})
    with pytest.raises(ConfigError, match="w4a8 kernel, which does not run here: switched off"):
        quantize_linear(nn.Linear(128, 128), "w4a8")


@needs_kernel
@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
def test_a_w4a8_target_speculative_equals_itself_alone(schedule: str) -> None:
    target, draft = bf16_llama_pair()
    fast_target = make_fast(target, quantize="w4a8")
    kernels = {m.kernel for m in fast_target.decoder.modules() if hasattr(m, "kernel")}
    assert kernels <= {kernel, w8a8_kernel}
    prompts = random_prompts(3, 128, seed=4)
    assert_speculative_equals_alone(
        fast_target,
        make_fast(draft, quantize="int8"),
        prompts,
        num_assistant_tokens=7,
        num_assistant_tokens_schedule=schedule,
    )


@needs_kernel
def test_a_transformers_target_with_a_w4a8_draft_gives_its_own_output() -> None:
    """The bench's `hybrid-w4a8` pairing: the target as loaded (transformers' forward) and
    the draft in 4 bits on the kernel, prompt lookup on: the target alone's output."""
    target, draft = bf16_llama_pair()
    fast_draft = make_fast(draft, static=True, quantize="w4a8", draft=True)
    prompts = random_prompts(4, 128, min_len=3, max_len=10, seed=5)
    assert_speculative_equals_alone(target, fast_draft, prompts)
    assert_speculative_equals_alone(target, fast_draft, prompts, prompt_lookup_num_tokens=8)


@needs_kernel
def test_a_batch_on_a_transformers_target_with_a_w4a8_draft_gives_its_own_rows() -> None:
    """`dynaspec generate --prompts-file F --batch-size 2` with the draft in 4 bits (the
    default on such a CPU) and the target as loaded: each row the batched target alone's."""
    import dynaspec
    from dynaspec.prompts import left_padded

    target, draft = bf16_llama_pair()
    fast_draft = make_fast(draft, static=True, quantize="w4a8", draft=True)
    ids, mask = left_padded(random_prompts(2, 128, min_len=3, max_len=9, seed=7), 0)
    common = {"attention_mask": mask, "max_new_tokens": 16, "pad_token_id": 0}
    alone = dynaspec.generate(target, None, ids, **common)
    for lookup in (None, 8):
        out = dynaspec.generate(target, fast_draft, ids, prompt_lookup_num_tokens=lookup, **common)
        assert torch.equal(out.sequences, alone.sequences)
