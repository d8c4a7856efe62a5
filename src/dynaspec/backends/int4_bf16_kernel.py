"""The 4-bit matmul for bf16 activations on AVX512-BF16 (csrc/int4bf16_matmul.cpp), built once.

Weights w = bf16(q * s + m), a code q in 0..15 and a float16 scale s and offset m per row
and group of 32 columns (the same codes as the AVX2 int4 kernel, `int4_kernel.quantize`):
0.625 bytes a weight, against bf16's 2 and int8's 1. torch's int4 kernel for bf16 does not
batch; this one rebuilds each weight in registers and multiplies it with VDPBF16PS like the
int8 bf16 kernel (csrc/bf16_tiles.h), so a verification over a few tokens costs about one
step. Measurements: docs/fast-path.md.

A row of a T-token product is bitwise the one-token product (see the source). Built and
loaded by backends/kernel_build.py; where it cannot be (no compiler, no AVX512-BF16, not
x86-64, or `DYNASPEC_INT4BF16_KERNEL=0`), bf16 int4 layers use torch's int4 kernel.
"""

from __future__ import annotations

import ctypes

import torch

from dynaspec.backends.kernel_build import Kernel, KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int
SPEC = KernelSpec(
    name="int4bf16",
    argtypes=(_P, _I, _I, _P, _P, _I, _P, _I),  # x, T, K, codes, bias, N, y, threads
    cpu_flags=("avx512f", "avx512bw", "avx512_bf16"),
    use="--quantize int4 in bf16",
)
ENV_SWITCH = SPEC.switch  # "0": never use the kernel
KERNEL = Kernel(SPEC)
ROWS = 64  # rows a tile of the layout
GROUP = 32  # columns a scale and offset cover (q4_K's sub-blocks)

available = KERNEL.available  # whether it runs here (built at the first call)
unavailable_reason = KERNEL.unavailable_reason  # why not (None when it does)
readiness = KERNEL.readiness  # one line for `dynaspec models`, without building it


def supports(out_features: int, in_features: int) -> bool:
    """Whether a layer of these widths can use the kernel (tiles of 64 rows, groups of 32)."""
    return out_features % ROWS == 0 and in_features % GROUP == 0 and available()


def dequantize(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The bf16 (N, K) weights the kernel multiplies: q * s + m (fused) rounded to bf16."""
    rows, columns = codes.shape
    grouped = codes.float().reshape(rows, -1, GROUP)
    fused = torch.addcmul(offset.float()[..., None], grouped, scale.float()[..., None])
    return fused.reshape(rows, columns).to(torch.bfloat16)


def packed(codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The kernel's layout (see the source), (N/64, K/32, 1280) bytes: per tile of 64 rows
    and group, the float16 s and m of its rows, then per vector of 16 rows and column pair
    16 bytes, byte j: lane j of the widened vector (row j/2, column j%2) in its low nibble,
    lane j + 16 (row 8 + j/2) in its high one."""
    rows, columns = codes.shape
    tiles, groups = rows // ROWS, columns // GROUP
    # (tile, vector, half, row, group, pair, column): row of the tile = v*16 + half*8 + row
    v = codes.to(torch.uint8).reshape(tiles, 4, 2, 8, groups, GROUP // 2, 2)
    v = v.permute(0, 4, 1, 5, 2, 3, 6).reshape(tiles, groups, 4, GROUP // 2, 2, 16)
    body = (v[..., 0, :] | (v[..., 1, :] << 4)).reshape(tiles, groups, ROWS * GROUP // 2)
    header = torch.stack(
        [scale.reshape(tiles, ROWS, groups), offset.reshape(tiles, ROWS, groups)], 0
    )  # (2, tile, row, group) float16
    header = header.permute(1, 3, 0, 2).contiguous().view(torch.uint8)  # (tile, group, 2, 128)
    return torch.cat([header.reshape(tiles, groups, 4 * ROWS), body], -1).contiguous()


@torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
def int4_bf16_matmul(
    rows: torch.Tensor, codes: torch.Tensor, group: int, bias: torch.Tensor | None
) -> torch.Tensor:
    """rows (M, K) bf16 @ w.T + bias (N,) float32: (M, N) float32, where `codes` is
    `packed(...)` of the weights w (N, K) in groups of `group` (32) columns."""
    function = KERNEL.function()
    if function is None:
        raise RuntimeError(f"the int4bf16 kernel is not available: {unavailable_reason()}")
    if group != GROUP:
        raise ValueError(f"the int4 bf16 kernel takes groups of {GROUP} columns, got {group}")
    rows = rows.to(torch.bfloat16).contiguous()
    num_out = codes.shape[0] * ROWS
    out = torch.empty(rows.shape[0], num_out, dtype=torch.float32)
    function(
        rows.data_ptr(),
        rows.shape[0],
        rows.shape[1],
        codes.data_ptr(),
        None if bias is None else bias.data_ptr(),
        num_out,
        out.data_ptr(),
        torch.get_num_threads(),
    )
    return out


matmul = int4_bf16_matmul  # what Int4Linear calls, whichever of the int4 kernels it holds
