"""dynaspec's 4-bit matmul for bf16 activations (backends/kernels/int4_bf16.py): what it
computes (the weights q * s + m), that a row of a many-token product is bitwise the
one-token product whatever path the token count takes, that bf16 int4 layers use it, that a
speculative int4 bf16 target gives its own output token for token, and that it stands
aside, with the reason, where it cannot be built."""

from __future__ import annotations

import pytest
import torch
from tiny_models import assert_speculative_equals_alone, bf16_llama_pair, random_prompts
from torch import nn

from dynaspec.backends import quant
from dynaspec.backends.kernels import int4_codes as int4_kernel
from dynaspec.backends.kernels.int4_bf16 import KERNEL as kernel
from dynaspec.backends.quant import Int4Linear, Int8Linear, quantize_linear
from dynaspec.backends.static import make_fast

needs_kernel = pytest.mark.skipif(
    not kernel.available(), reason=f"int4 bf16 kernel: {kernel.unavailable_reason()}"
)


def _problem(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator) / 8
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(tokens, columns, generator=generator).to(torch.bfloat16)
    return int4_kernel.quantize(weight, 32), bias, x


@needs_kernel
@pytest.mark.parametrize("rows,columns", [(64, 32), (128, 160), (192, 1536)])
@pytest.mark.parametrize("tokens", [1, 5, 9])  # in registers, in registers, by blocks
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_multiplies_the_weights_it_stands_for(rows, columns, tokens, with_bias) -> None:
    codes, bias, x = _problem(rows, columns, tokens)
    bias = bias if with_bias else None
    out = kernel.matmul(x, kernel.packed(*codes), 32, bias)
    expected = x.double() @ kernel.dequantize(*codes).double().T
    if bias is not None:
        expected = expected + bias.double()
    assert out.shape == (tokens, rows) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("columns", [96, 288])  # one block of columns; three, the last short
def test_a_row_of_many_tokens_is_bitwise_the_one_token_product(columns) -> None:
    codes, bias, x = _problem(128, columns, tokens=53, seed=3)
    packed = kernel.packed(*codes)
    singles = torch.cat([kernel.matmul(x[i : i + 1], packed, 32, bias) for i in range(53)])
    for tokens in (*range(1, 32), 47, 48, 49, 53):
        many = kernel.matmul(x[:tokens], packed, 32, bias)
        assert torch.equal(many, singles[:tokens]), tokens


def test_the_layout_holds_each_groups_scales_then_its_nibbles() -> None:
    codes = torch.arange(64 * 64).remainder(16).to(torch.uint8).view(64, 64)
    codes[26, 53] = 9
    scale = torch.arange(128, dtype=torch.float16).view(64, 2)
    offset = -scale
    packed = kernel.packed(codes, scale, offset)
    assert packed.shape == (1, 4, 2, 320)  # (tiles, vectors, groups, bytes)
    # vector 1 (rows 16-31), group 1: s then m of its 16 rows, then 4 lines of codes
    group = packed[0, 1, 1]
    header = group[:64].view(torch.float16)
    assert torch.equal(header[:16], scale[16:32, 1]) and torch.equal(header[16:], offset[16:32, 1])
    # row 26 (row 10 of the vector), column 53 (column 21 of group 1): line 2, pair 10 of the
    # group = nibble 2 of the line, second column of the pair: lane 2 * 10 + 1 = 21, bits 8-11
    lane = int(group[64 + 2 * 64 + 21 * 2]) | int(group[64 + 2 * 64 + 21 * 2 + 1]) << 8
    assert (lane >> 8) & 15 == 9
    others = [int(codes[26, 32 + 16 + 2 * n + 1]) for n in (0, 1, 3)]  # columns 49, 51, 55
    assert [(lane >> 4 * n) & 15 for n in (0, 1, 3)] == others


@needs_kernel
def test_bf16_int4_layers_use_the_kernel() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(96, 128).to(torch.bfloat16)
    quantized = Int4Linear(layer.weight.detach(), layer.bias)
    assert quantized.kernel is kernel
    assert quantized.error < 0.2 and quantized.bias.dtype == torch.float32
    out = quantized(torch.randn(3, 96).to(torch.bfloat16))
    assert out.dtype == torch.bfloat16 and out.shape == (3, 128)
    # a layer already on a 4-bit grid (integers: exact in bf16) comes back exactly
    grid = (torch.randint(0, 16, (128, 96)) - 8).to(torch.bfloat16)
    assert Int4Linear(grid, None).error == 0.0
    # rows not a multiple of 64: torch's int4 kernel; finer than 4 bits: int8
    assert not Int4Linear(torch.randn(48, 96).to(torch.bfloat16), None).kernel
    assert isinstance(quantize_linear(layer, "int4"), Int8Linear)  # random weights: fine


@needs_kernel
@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
def test_a_bf16_int4_target_speculative_equals_itself_alone(schedule: str, monkeypatch) -> None:
    monkeypatch.setattr(quant, "INT4_TOLERANCE", 1.0)  # random weights: keep every layer int4
    target, draft = bf16_llama_pair()
    fast_target = make_fast(target, quantize="int4")
    layers = [m for m in fast_target.decoder.modules() if isinstance(m, Int4Linear)]
    assert layers and all(m.kernel is kernel for m in layers)
    fast_draft = make_fast(draft, quantize="int4")
    prompts = random_prompts(3, 128, seed=4)
    assert_speculative_equals_alone(
        fast_target,
        fast_draft,
        prompts,
        num_assistant_tokens=7,
        num_assistant_tokens_schedule=schedule,
    )


def test_without_the_kernel_bf16_int4_layers_use_torchs_kernel(monkeypatch) -> None:
    monkeypatch.setattr(kernel, "state", {"function": None, "reason": "switched off"})
    assert not kernel.available() and kernel.unavailable_reason() == "switched off"
    quantized = Int4Linear(torch.randn(128, 64).to(torch.bfloat16), None)
    assert not quantized.kernel and quantized.scale_and_zero is not None
    assert quantized(torch.randn(6, 64).to(torch.bfloat16)).shape == (6, 128)
    with pytest.raises(RuntimeError, match="switched off"):
        kernel.matmul(torch.randn(1, 64), quantized.weight, 32, None)
    monkeypatch.setattr(kernel, "state", {})
    monkeypatch.setenv(kernel.SPEC.switch, "0")
    assert kernel.SPEC.switch == "DYNASPEC_INT4BF16_KERNEL"
    assert "not used" in kernel.readiness() and kernel.state == {}
