"""dynaspec's int8 x int8 matmul (backends/kernels/w8a8.py, `--quantize w8a8`): that it
computes its reference bit for bit (activations quantized per token and group of 128
columns, integer dot products per group), that the reference is the product of the
dequantized activations and weights, that a row of a many-token product is bitwise the
one-token product whatever path the token count takes, that `quantize="w8a8"` layers use it
and say why where they cannot, and that a speculative w8a8 target gives its own output token
for token."""

from __future__ import annotations

import pytest
import torch
from tiny_models import assert_speculative_equals_alone, bf16_llama_pair, random_prompts
from torch import nn

from dynaspec.backends.kernels.w8a8 import KERNEL as kernel
from dynaspec.backends.quant import Int8Linear, quantize_linear
from dynaspec.backends.static import make_fast
from dynaspec.errors import ConfigError

needs_kernel = pytest.mark.skipif(
    not kernel.available(), reason=f"w8a8 kernel: {kernel.unavailable_reason()}"
)


def _problem(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(-127, 128, (rows, columns), dtype=torch.int8, generator=generator)
    scale = torch.rand(rows, generator=generator) / 64
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(tokens, columns, generator=generator)
    x[0, 3] = 60.0  # an outlier: only its own group's scale grows
    if tokens > 2:
        x[2] = 0.0  # a row of zeros: scale 0, output = bias
    return codes, scale, bias, x.to(torch.bfloat16)


@needs_kernel
@pytest.mark.parametrize("rows,columns", [(64, 128), (128, 1536), (192, 8960)])
@pytest.mark.parametrize("tokens", [1, 4, 9])  # one pass of 1; 4 padded to 6; 6 + 3
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_computes_its_reference_bit_for_bit(rows, columns, tokens, with_bias) -> None:
    codes, scale, bias, x = _problem(rows, columns, tokens)
    bias = bias if with_bias else None
    out = kernel.matmul(x, kernel.tiled(codes), scale, bias)
    assert out.shape == (tokens, rows) and out.dtype == torch.float32
    assert torch.equal(out, kernel.reference(x, codes, scale, bias))


def test_the_reference_is_the_product_of_the_dequantized_activations() -> None:
    codes, scale, bias, x = _problem(64, 384, tokens=5, seed=1)
    a, a_scale = kernel.quantize_activations(x)
    assert a.abs().max() <= 127 and torch.equal(a, a.round())
    # per token and group of 128 columns: the largest |x| maps to 127
    groups = x.float().view(5, 3, 128).abs().amax(dim=2)
    torch.testing.assert_close(a_scale, groups / 127)
    assert torch.all(a[2] == 0) and torch.all(a_scale[2] == 0)  # the row of zeros
    dequantized = (a.view(5, 3, 128) * a_scale[..., None]).view(5, 384)
    expected = dequantized.double() @ codes.double().T * scale.double() + bias.double()
    out = kernel.reference(x, codes, scale, bias)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)
    # and close to the weight-only product (the outlier's group is the coarsest)
    weight_only = x.double() @ codes.double().T * scale.double() + bias.double()
    assert (out.double() - weight_only).norm() / weight_only.norm() < 0.05


@needs_kernel
def test_a_row_of_many_tokens_is_bitwise_the_one_token_product() -> None:
    codes, scale, bias, x = _problem(128, 256, tokens=53, seed=3)
    tiled = kernel.tiled(codes)
    singles = torch.cat([kernel.matmul(x[i : i + 1], tiled, scale, bias) for i in range(53)])
    # 1 token alone; 2-5 padded to a pass of 6; then passes of 6 and the rest
    for tokens in (*range(1, 32), 47, 48, 49, 53):
        many = kernel.matmul(x[:tokens], tiled, scale, bias)
        assert torch.equal(many, singles[:tokens]), tokens


def test_the_tiled_layout_holds_column_quads_of_sixty_four_rows() -> None:
    codes = torch.arange(128 * 8, dtype=torch.int32).remainder(255).sub(127).to(torch.int8)
    codes = codes.view(128, 8)
    tiled = kernel.tiled(codes)
    assert tiled.shape == (2, 2, 64, 4) and tiled.dtype == torch.uint8
    # tile 1, quad 1, row 5 of the tile: row 69, columns 4..7, shifted by 128
    assert torch.equal(tiled[1, 1, 5].to(torch.int16) - 128, codes[69, 4:8].to(torch.int16))
    assert torch.equal(kernel.untiled(tiled), codes)


@needs_kernel
def test_w8a8_layers_use_the_kernel() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(256, 128).to(torch.bfloat16)
    quantized = quantize_linear(layer, "w8a8")
    assert isinstance(quantized, Int8Linear) and quantized.kernel is kernel
    x = torch.randn(2, 5, 256).to(torch.bfloat16)
    out = quantized(x)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 5, 128)
    expected = kernel.reference(
        x.view(10, 256), quantized.int8_codes(), quantized.scale, quantized.bias
    )
    assert torch.equal(out.view(10, 128), expected.to(torch.bfloat16))


@needs_kernel
def test_a_layer_the_kernel_cannot_serve_says_which_and_what_to_use() -> None:
    with pytest.raises(ConfigError, match="multiples of 64 .out. and 128 .in.*quantize='int8'"):
        quantize_linear(nn.Linear(96, 128), "w8a8")


def test_without_the_kernel_w8a8_says_why(monkeypatch) -> None:
    monkeypatch.setattr(kernel, "state", {"function": None, "reason": "switched off"})
    with pytest.raises(ConfigError, match="switched off; use quantize='int8'"):
        quantize_linear(nn.Linear(128, 128), "w8a8")


@needs_kernel
@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
def test_a_w8a8_target_speculative_equals_itself_alone(schedule: str) -> None:
    target, draft = bf16_llama_pair()
    fast_target = make_fast(target, quantize="w8a8")
    layers = [m for m in fast_target.decoder.modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.kernel is kernel for m in layers)  # every layer on the kernel
    prompts = random_prompts(3, 128, seed=4)
    assert_speculative_equals_alone(
        fast_target,
        make_fast(draft, quantize="int8"),
        prompts,
        num_assistant_tokens=7,
        num_assistant_tokens_schedule=schedule,
    )
