"""The 4-bit matmul for float32 activations on AVX2 (csrc/int4_matmul.cpp), built once.

Weights w = q * s + m with codes q in 0..15 and a float16 scale s and minimum m per row and
group of 32 columns (q4_K's sub-blocks, so that a model converted from a q4_K GGUF comes
back exactly): 0.625 bytes a weight (q4_K: 0.5625, int8: 1). A decoding step reads every
weight once, so one token costs less than on the int8 kernel; decoding the codes costs
arithmetic, which a pass over the codes shares among up to 6 tokens. Ten 1536 -> 8960 and
five 8960 -> 1536 layers (129 MB of codes and scales), 2-core AMD EPYC (Zen 3, AVX2 only),
2 threads, milliseconds for all 15, best of 5, the int8 kernel on the same layers in the
same run (the machine is noisy, +-20% between runs):

    T                               1      2      3      4      6      8     16
    int8, dynaspec's kernel        12.4   16.7   19.5   21.1   27.6   37.2   75.1
    int4, this kernel              11.5   12.4   17.5   18.6   24.5   37.1   81.7

A row of a T-token product is bitwise the one-token product (see the source). Built and
loaded by backends/kernel_build.py; where it cannot be (no compiler, no AVX2/FMA/F16C, not
x86-64, or `DYNASPEC_INT4_KERNEL=0`), int4 layers use torch's int4 kernel.
"""

from __future__ import annotations

import ctypes

import torch

from dynaspec.backends.kernel_build import Kernel, KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int
SPEC = KernelSpec(
    name="int4",
    # x, T, K, codes, G, bias, N, scratch, y, threads
    argtypes=(_P, _I, _I, _P, _I, _P, _I, _P, _P, _I),
    cpu_flags=("avx2", "fma", "f16c"),
    use="--quantize int4 in float32",
)
ENV_SWITCH = SPEC.switch  # "0": never use the kernel
KERNEL = Kernel(SPEC)
GROUP_SIZES = (32,)  # columns a scale and minimum cover: q4_K's sub-blocks


available = KERNEL.available  # whether it runs here (built at the first call)
unavailable_reason = KERNEL.unavailable_reason  # why not (None when it does)
readiness = KERNEL.readiness  # one line for `dynaspec models`, without building it


def group_size(in_features: int) -> int | None:
    return next((g for g in GROUP_SIZES if in_features % g == 0), None)


def supports(out_features: int, in_features: int) -> bool:
    """Whether a layer of these widths can use the kernel (tiles of 8 rows, whole groups)."""
    return out_features % 8 == 0 and group_size(in_features) is not None and available()


def quantize(weight: torch.Tensor, group: int) -> tuple[torch.Tensor, ...]:
    """(codes (N, K) uint8 in 0..15, scale (N, K/group) float16, minimum (same)).

    Each group's minimum is m; its scale s the better (smaller squared error) of the range
    over 15 and the smallest gap between its distinct values: weights that already lie on a
    4-bit grid (a model converted from a q4_K GGUF) keep that grid, so they come back
    exactly, up to the float16 rounding of s and m. Both are rounded to float16 first, so
    that q * s + m is what the kernel computes."""
    rows, columns = weight.shape
    groups = weight.detach().float().reshape(rows, columns // group, group)
    low, high = groups.amin(-1), groups.amax(-1)
    minimum = low.half()
    by_range = _fit(groups, minimum, (high - low) / 15.0)
    by_gap = _fit(groups, minimum, _smallest_gap(groups, high - low))
    better = by_gap[2] < by_range[2]  # (N, K/group): the gap's squared error is smaller
    codes = torch.where(better[..., None], by_gap[0], by_range[0])
    scale = torch.where(better, by_gap[1], by_range[1])
    return codes.to(torch.uint8).reshape(rows, columns), scale, minimum


def _fit(
    groups: torch.Tensor, minimum: torch.Tensor, scale: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes, the float16 scale, each group's squared error) for one scale a group."""
    scale = scale.clamp_min(1e-6).half()  # float16's smallest normal: 6e-5
    codes = (groups - minimum.float()[..., None]).div_(scale.float()[..., None])
    codes = codes.round_().clamp_(0, 15)
    error = codes * scale.float()[..., None] + minimum.float()[..., None] - groups
    return codes, scale, error.square_().sum(-1)


def _smallest_gap(groups: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """Each group's smallest gap between distinct values (its range where it has one)."""
    ordered = groups.sort(-1).values
    gaps = ordered.diff(dim=-1)
    gaps = torch.where(gaps > span[..., None] * 1e-4, gaps, torch.inf)
    smallest = gaps.amin(-1)
    return torch.where(torch.isfinite(smallest), smallest, span)


def dequantize(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    """The float32 (N, K) weights the codes stand for."""
    rows, columns = codes.shape
    group = columns // scale.shape[1]
    grouped = codes.float().reshape(rows, -1, group)
    return (grouped * scale.float()[..., None] + minimum.float()[..., None]).reshape(rows, columns)


def packed(codes: torch.Tensor, scale: torch.Tensor, minimum: torch.Tensor) -> torch.Tensor:
    """The kernel's layout (see the source), (N/8, K/group, 32 + 4 * group) bytes: per tile
    of 8 rows, group by group, the float16 scales and minimums of its rows, then a 32-bit
    word a row and chunk of 8 columns, column k in bits 4k..4k+3."""
    rows, columns = codes.shape
    groups = scale.shape[1]
    group = columns // groups
    # (tile, row, group, chunk, byte, nibble): column = chunk * 8 + byte * 2 + nibble
    v = codes.reshape(rows // 8, 8, groups, group // 8, 4, 2)
    words = (v[..., 0] | (v[..., 1] << 4)).permute(0, 2, 3, 1, 4)  # (tile, group, chunk, row, 4)
    body = words.reshape(rows // 8, groups, 4 * group)
    header = torch.stack(
        [scale.reshape(rows // 8, 8, groups), minimum.reshape(rows // 8, 8, groups)], 1
    )
    header = header.permute(0, 3, 1, 2).contiguous().view(torch.uint8)  # (tile, group, 2, 16)
    return torch.cat([header.reshape(rows // 8, groups, 32), body], -1).contiguous()


@torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
def int4_matmul(
    rows: torch.Tensor, codes: torch.Tensor, group: int, bias: torch.Tensor | None
) -> torch.Tensor:
    """rows (M, K) float32 @ w.T + bias (N,): (M, N) float32, where `codes` is `packed(...)`
    of the weights w (N, K) in groups of `group` columns."""
    function = KERNEL.function()
    if function is None:
        raise RuntimeError(f"the int4 kernel is not available: {unavailable_reason()}")
    rows = rows.to(torch.float32).contiguous()
    tokens, columns = rows.shape
    num_out = codes.shape[0] * 8
    out = torch.empty(tokens, num_out, dtype=torch.float32)
    scratch = torch.empty(tokens * (columns // group), dtype=torch.float32)  # groups' sums of x
    function(
        rows.data_ptr(),
        tokens,
        columns,
        codes.data_ptr(),
        group,
        None if bias is None else bias.data_ptr(),
        num_out,
        scratch.data_ptr(),
        out.data_ptr(),
        torch.get_num_threads(),
    )
    return out


matmul = int4_matmul  # what Int4Linear calls, whichever of the int4 kernels it holds
