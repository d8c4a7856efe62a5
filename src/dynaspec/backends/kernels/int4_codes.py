"""The 4-bit codes dynaspec's 4-bit kernel multiplies (w4a8): weights
w = q * s + m with codes q in 0..15 and a float16 scale s and offset m per row and group of
32 columns (q4_K's sub-blocks, so that a model converted from a q4_K GGUF comes back
exactly): 0.625 bytes a weight (q4_K: 0.5625, int8: 1). The kernel lays the codes out its
own way (its `packed`).
"""

from __future__ import annotations

import torch


def quantize(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    """(codes (N, K) uint8 in 0..15, scale (N, K/group) float16, offset (same)).

    Each group's codes, scale s and offset m are the best fit (smallest squared error) of:
    s from the group's range over 15, s from the gaps between its distinct values (`_step`),
    both with m its minimum, then s and m refitted by least squares to the better one's
    codes (REFITS times). Weights that already lie on a 4-bit grid (a model converted from
    a q4_K GGUF) keep that grid: in float32 they come back exactly, up to the float16
    rounding of s and m. Rounded to bf16 they sit off their grid points by up to 1/32 of a
    step, so that the smallest gap alone misjudged s by up to 6% and the codes near 15 by
    a whole step; on Qwen2.5-Coder-1.5B in bf16 a q4_K layer came back 1.5% off (above
    INT4_TOLERANCE, so every layer stayed in int8), now 0.14% off, about bf16's own
    rounding. s and m are rounded to float16 before the codes are chosen, so that q * s + m
    is what the kernel computes."""
    rows, columns = weight.shape
    codes = torch.empty(rows, columns, dtype=torch.uint8)
    scale = torch.empty(rows, columns // group, dtype=torch.float16)
    offset = torch.empty_like(scale)
    for first in range(0, rows, QUANTIZE_ROWS):  # bounds the float32 temporaries
        part = slice(first, first + QUANTIZE_ROWS)
        codes[part], scale[part], offset[part] = _quantize_rows(weight[part], group)
    return codes, scale, offset


QUANTIZE_ROWS = 2048  # rows fitted at a time (a whole head's temporaries took gigabytes)


def _quantize_rows(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    """`quantize` for a few rows."""
    rows, columns = weight.shape
    groups = weight.detach().float().reshape(rows, columns // group, group)
    low, high = groups.amin(-1), groups.amax(-1)
    best = _better(
        _fit(groups, low, (high - low) / 15.0),
        _fit(groups, low, _step(groups, high - low)),
    )
    for _ in range(REFITS):
        best = _better(best, _fit(groups, *_least_squares(groups, best[0])))
    codes, scale, offset, _ = best
    return codes.to(torch.uint8).reshape(rows, columns), scale, offset


REFITS = 2  # least-squares refits after the first choice

Fit = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _fit(groups: torch.Tensor, offset: torch.Tensor, scale: torch.Tensor) -> Fit:
    """(codes, the float16 scale, the float16 offset, each group's squared error) for one
    offset and scale a group."""
    scale = scale.clamp_min(1e-6).half()  # float16's smallest normal: 6e-5
    offset = offset.half()
    codes = (groups - offset.float()[..., None]).div_(scale.float()[..., None])
    codes = codes.round_().clamp_(0, 15)
    error = codes * scale.float()[..., None] + offset.float()[..., None] - groups
    return codes, scale, offset, error.square_().sum(-1)


def _better(first: Fit, second: Fit) -> Fit:
    """Per group, whichever of two fits has the smaller squared error."""
    take = second[3] < first[3]  # (N, K/group)
    codes = torch.where(take[..., None], second[0], first[0])
    scale, offset, error = (
        torch.where(take, b, a) for a, b in zip(first[1:], second[1:], strict=True)
    )
    return codes, scale, offset, error


def _least_squares(groups: torch.Tensor, codes: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each group's (offset, scale) with the smallest squared error of codes * scale +
    offset (a group whose codes are all equal gets scale 0, which `_fit` clamps)."""
    code_mean, weight_mean = codes.mean(-1), groups.mean(-1)
    centred = codes - code_mean[..., None]
    spread = centred.square().sum(-1)
    covariance = (centred * (groups - weight_mean[..., None])).sum(-1)
    scale = torch.where(spread > 0, covariance / spread.clamp_min(1e-12), 0.0)
    return weight_mean - scale * code_mean, scale


def _step(groups: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """Each group's step between adjacent grid points, as the mean of the gaps between its
    sorted distinct values that lie within 1.5x the smallest (one step each, each off by the
    rounding of its two ends, which the mean averages out); its range where it has none."""
    gaps = groups.sort(-1).values.diff(dim=-1)
    gaps = torch.where(gaps > span[..., None] * 1e-4, gaps, torch.inf)
    smallest = gaps.amin(-1, keepdim=True)
    adjacent = gaps <= 1.5 * smallest
    mean = torch.where(adjacent, gaps, 0.0).sum(-1) / adjacent.sum(-1).clamp_min(1)
    return torch.where(torch.isfinite(smallest.squeeze(-1)), mean, span)


def relative_error(codes: tuple[torch.Tensor, ...], weight: torch.Tensor) -> float:
    """|dequantize(*codes) - weight| / |weight| (Frobenius), QUANTIZE_ROWS rows at a time."""
    error = total = 0.0
    for first in range(0, weight.shape[0], QUANTIZE_ROWS):
        rows = slice(first, first + QUANTIZE_ROWS)
        part = weight[rows].float()
        approximation = dequantize(*(tensor[rows] for tensor in codes))
        error += float((approximation - part).square().sum())
        total += float(part.square().sum())
    return (error / max(total, 1e-60)) ** 0.5


def dequantize(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The float32 (N, K) weights the codes stand for."""
    rows, columns = codes.shape
    group = columns // scale.shape[1]
    grouped = codes.float().reshape(rows, -1, group)
    return (grouped * scale.float()[..., None] + offset.float()[..., None]).reshape(rows, columns)
