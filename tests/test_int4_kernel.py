"""dynaspec's 4-bit matmul for float32 activations (backends/kernels/int4.py): what it computes,
that a row of a many-token product is bitwise the one-token product, that weights already on
a 4-bit grid (a q4_K GGUF's) come back exactly while finer layers stay in int8, and that it
stands aside, with the reason, where it cannot be built."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model
from torch import nn

from dynaspec.backends.kernels import int4_codes
from dynaspec.backends.kernels.int4 import KERNEL as int4_kernel
from dynaspec.backends.quant import INT4_TOLERANCE, Int4Linear, Int8Linear, quantize_linear
from dynaspec.backends.static import make_fast

needs_kernel = pytest.mark.skipif(
    not int4_kernel.available(), reason=f"int4 kernel: {int4_kernel.unavailable_reason()}"
)


def _grid_weight(
    rows: int, columns: int, seed: int = 0, levels: int = 16, centred: bool = False
) -> torch.Tensor:
    """Weights on a 4-bit grid per group of 32 (as a q4_K GGUF's), using `levels` of the 16;
    `centred`: the lowest point 4 to 10 steps below 0, as in a trained model's q4_K blocks."""
    generator = torch.Generator().manual_seed(seed)
    groups = columns // 32
    scale = (torch.rand(rows, groups, 1, generator=generator) / 100 + 1e-3).half().float()
    low = (-torch.rand(rows, groups, 1, generator=generator) / 10).half().float()
    if centred:
        low = (-scale * (4 + 6 * torch.rand(rows, groups, 1, generator=generator))).half().float()
    codes = torch.randint(0, levels, (rows, groups, 32), generator=generator).float()
    codes[..., 0], codes[..., 1] = 0, levels - 1  # both ends used
    return (codes * scale + low).reshape(rows, columns)


def _product(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator) / 30
    codes = int4_codes.quantize(weight, 32)
    x = torch.randn(tokens, columns, generator=generator)
    bias = torch.randn(rows, generator=generator)
    return codes, x, bias


@needs_kernel
@pytest.mark.parametrize("rows,columns", [(8, 32), (64, 1536), (264, 96), (40, 8960)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_computes_the_product_with_the_4_bit_weights(rows, columns, with_bias) -> None:
    codes, x, bias = _product(rows, columns, tokens=7)
    bias = bias if with_bias else None
    out = int4_kernel.matmul(x, int4_kernel.packed(*codes), 32, bias)
    expected = x.double() @ int4_codes.dequantize(*codes).double().T
    if bias is not None:
        expected = expected + bias.double()
    assert out.shape == (7, rows) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("rows", [72, 80])  # an odd and an even number of tiles of 8 rows
def test_a_row_of_many_tokens_is_bitwise_the_one_token_product(rows) -> None:
    codes, x, bias = _product(rows, 1536, tokens=19, seed=3)
    packed = int4_kernel.packed(*codes)
    singles = torch.cat([int4_kernel.matmul(x[i : i + 1], packed, 32, bias) for i in range(19)])
    for tokens in range(1, 20):  # every pass: 6 tokens at a time, then the rest
        many = int4_kernel.matmul(x[:tokens], packed, 32, bias)
        assert torch.equal(many, singles[:tokens]), tokens


def test_the_packed_layout_puts_a_row_of_a_chunk_in_one_word() -> None:
    codes = torch.arange(16 * 64).remainder(16).to(torch.uint8).view(16, 64)
    codes[9, 45] = 11  # tile 1, row 1 of it, group 1, chunk 1, column 5: byte 2, high nibble
    scale = torch.full((16, 2), 0.5).half()
    minimum = torch.full((16, 2), -1.0).half()
    packed = int4_kernel.packed(codes, scale, minimum)
    assert packed.shape == (2, 2, 32 + 4 * 32)  # (tiles, groups, header + codes)
    header = packed[1, 1, :32].view(torch.float16)
    assert torch.equal(header, torch.tensor([0.5] * 8 + [-1.0] * 8).half())
    word = packed[1, 1, 32 + 32 + 4 : 32 + 32 + 8]  # chunk 1 (after chunk 0), row 1's word
    assert word[2].item() == (codes[9, 44].item() | (11 << 4))


def test_weights_on_a_4_bit_grid_come_back_exactly() -> None:
    for levels in (16, 13):  # every level used, or some missing (the range is not 15 steps)
        weight = _grid_weight(16, 96, seed=levels, levels=levels)
        back = int4_codes.dequantize(*int4_codes.quantize(weight, 32))
        assert (back - weight).norm() / weight.norm() < 2e-3, levels
    # the control: the range over 15 alone misses a grid that does not use all 16 levels
    weight = _grid_weight(16, 96, seed=1, levels=12)
    groups = weight.reshape(16, 3, 32)
    span = groups.amax(-1) - groups.amin(-1)
    naive = ((groups - groups.amin(-1, keepdim=True)) / (span / 15)[..., None]).round()
    naive = naive * (span / 15)[..., None] + groups.amin(-1, keepdim=True)
    assert (naive.reshape(16, 96) - weight).norm() / weight.norm() > 2e-2


def test_grid_weights_rounded_to_bf16_keep_their_grid() -> None:
    """A q4_K model saved in bf16: every weight is a grid point rounded to 8 bits of mantissa.
    The range and the smallest gap both misjudge the step; the least-squares refit finds it,
    so the 4-bit weights differ from the bf16 ones by about bf16's own rounding."""
    for levels in (16, 13):
        exact = _grid_weight(64, 1536, seed=levels, levels=levels, centred=True)
        rounded = exact.bfloat16()
        back = int4_codes.dequantize(*int4_codes.quantize(rounded, 32))
        rounding = (rounded.float() - exact).norm() / exact.norm()
        error = (back - rounded.float()).norm() / rounded.float().norm()
        assert error < 3 * rounding and error < INT4_TOLERANCE / 2, (levels, error, rounding)
    # the control: the smallest gap alone (its noise times up to 15) leaves them off the grid
    groups = rounded.float().reshape(64, 48, 32)
    gaps = groups.sort(-1).values.diff(dim=-1)
    step = torch.where(gaps > 0, gaps, torch.inf).amin(-1, keepdim=True)
    low = groups.amin(-1, keepdim=True)
    naive = ((groups - low) / step).round().clamp(0, 15) * step + low
    assert (naive - groups).norm() / groups.norm() > 4 * error


@needs_kernel
def test_int4_keeps_4_bit_layers_in_int4_and_finer_ones_in_int8() -> None:
    on_grid = nn.Linear(96, 16)
    on_grid.weight.data = _grid_weight(16, 96)
    made = quantize_linear(on_grid, "int4")
    assert isinstance(made, Int4Linear) and made.kernel and made.error < INT4_TOLERANCE
    x = torch.randn(3, 96)
    torch.testing.assert_close(made(x), on_grid(x), rtol=1e-2, atol=1e-3)
    finer = nn.Linear(96, 16)  # float weights: 4 bits would lose about 10%
    assert isinstance(quantize_linear(finer, "int4"), Int8Linear)
    # a draft's layers: 4 bits whatever they lose (only acceptance depends on them)
    coarse = quantize_linear(finer, "int4", int4_everywhere=True)
    assert isinstance(coarse, Int4Linear) and coarse.error > INT4_TOLERANCE
    want = finer(x)  # 4 bits move its outputs about as much as its weights (~10%)
    assert (coarse(x) - want).norm() / want.norm() < 0.3


@needs_kernel
def test_a_fast_draft_puts_every_layer_in_4_bits_and_a_target_does_not() -> None:
    def kinds(adapter) -> set[str]:
        return {type(m).__name__ for m in adapter.decoder.modules() if "Linear" in type(m).__name__}

    target = make_fast(tiny_model("llama"), quantize="int4")
    draft = make_fast(tiny_model("llama"), quantize="int4", draft=True)
    assert "Int8Linear" in kinds(target)  # the tiny model's float weights are finer
    assert kinds(draft) == {"Int4Linear"} and draft.fast.int4_everywhere


def test_without_the_kernel_int4_layers_use_torchs_kernel(monkeypatch) -> None:
    monkeypatch.setattr(int4_kernel, "state", {"function": None, "reason": "switched off"})
    assert not int4_kernel.available() and int4_kernel.unavailable_reason() == "switched off"
    layer = nn.Linear(64, 48)
    quantized = Int4Linear(layer.weight.detach(), layer.bias)
    assert not quantized.kernel and quantized.error == 0.0
    assert quantized(torch.randn(3, 64)).shape == (3, 48)
    with pytest.raises(RuntimeError, match="switched off"):
        int4_kernel.matmul(torch.randn(1, 64), torch.zeros(6, 2, 160), 32, None)


def test_the_switch_is_reported_without_building(monkeypatch) -> None:
    monkeypatch.setattr(int4_kernel, "state", {})
    monkeypatch.setenv(int4_kernel.SPEC.switch, "0")
    assert int4_kernel.SPEC.switch == "DYNASPEC_INT4_KERNEL"
    line = int4_kernel.readiness()
    assert "not used" in line and "DYNASPEC_INT4_KERNEL=0" in line
    assert int4_kernel.state == {}
    assert int4_kernel.load() == (None, "DYNASPEC_INT4_KERNEL=0")
