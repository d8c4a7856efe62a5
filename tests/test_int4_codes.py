"""The 4-bit codes the w4a8 kernel multiplies (backends/kernels/int4_codes.py): weights
already on a 4-bit grid (a q4_K GGUF's) come back exactly, also after rounding to bf16."""

from __future__ import annotations

import torch

from dynaspec.backends.kernels import int4_codes
from dynaspec.backends.quant import INT4_TOLERANCE


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
