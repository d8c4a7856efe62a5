"""int8 weights and int8 activations on AVX512-VNNI (csrc/w8a8_matmul.cpp), built once:
`--quantize w8a8`.

The weights are the int8 target's (`quant.int8_codes`: per row, absmax / 127); the bf16
activations are quantized per token and group of GROUP columns inside the kernel (absmax /
127, OpenVINO's "dynamic quantization" on the CPU), and the products run in integers with
VPDPBUSD: 64 multiply-adds an instruction on the codes as they are, against the bf16 int8
kernel's 32 after widening each code. So a verification over 6-8 tokens costs much less
than the bf16 int8 kernel's (numbers in docs/design/fast-path.md). The output is not the weight-only
int8 target's: `w8a8` is a model of its own, whose steps and verifications agree bitwise
(a row of a T-token product is the one-token product; `reference` computes the same bits).

Built and loaded by backends/kernel_build.py; where it cannot be (no compiler, no
AVX512-VNNI, not x86-64, or `DYNASPEC_W8A8_KERNEL=0`), `available()` is False and
`--quantize w8a8` says so.
"""

from __future__ import annotations

import ctypes

import torch

from dynaspec.backends.kernels.build import Kernel, KernelSpec, scaled_matmul

_P, _I = ctypes.c_void_p, ctypes.c_int
SPEC = KernelSpec(
    name="w8a8",
    # x, T, K, codes, scale, bias, N, y, threads, bf16
    argtypes=(_P, _I, _I, _P, _P, _P, _I, _P, _I, _I),
    cpu_flags=("avx512f", "avx512bw", "avx512_vnni"),
    bf16_out=True,
    use="--quantize w8a8 in bf16",
)
ENV_SWITCH = SPEC.switch  # "0": never use the kernel
KERNEL = Kernel(SPEC)
ROWS = 64  # rows a tile of the layout
GROUP = 128  # activation columns sharing one scale (csrc/w8a8_matmul.cpp)

available = KERNEL.available
unavailable_reason = KERNEL.unavailable_reason
readiness = KERNEL.readiness


def supports(out_features: int, in_features: int) -> bool:
    """Whether a layer of these widths can use the kernel (tiles of 64 rows, groups of
    GROUP columns)."""
    return out_features % ROWS == 0 and in_features % GROUP == 0 and available()


def tiled(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 codes as the kernel reads them: q + 128 as unsigned bytes, (N/64, K/4,
    64, 4): a tile of 64 rows is one stream, a column quad of 16 rows one vector."""
    rows, columns = codes.shape
    shifted = (codes.to(torch.int16) + 128).to(torch.uint8)
    return shifted.view(rows // ROWS, ROWS, columns // 4, 4).permute(0, 2, 1, 3).contiguous()


def untiled(tiled_codes: torch.Tensor) -> torch.Tensor:
    """The (N, K) int8 codes back from `tiled(codes)`."""
    tiles, quads, _, _ = tiled_codes.shape
    shifted = tiled_codes.permute(0, 2, 1, 3).reshape(tiles * ROWS, quads * 4)
    return (shifted.to(torch.int16) - 128).to(torch.int8)


@torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
def w8a8_matmul(
    rows: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(quantized rows (M, K) @ q.T) * scale (N,) + bias (N,): (M, N) `out_dtype` (float32
    or bf16), where `codes` is `tiled(q)` and `scale`, `bias` are float32; rows are bf16."""
    rows = rows.to(torch.bfloat16).contiguous()
    return scaled_matmul(KERNEL, rows, codes, scale, bias, codes.shape[0] * ROWS, out_dtype)


matmul = w8a8_matmul  # what Int8Linear calls, whichever of the int8 kernels it holds


def quantize_activations(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes (M, K) float32 integers in -127..127, scales (M, K/GROUP) float32), as the
    kernel computes them: per token and group, absmax / 127, round half to even."""
    x = rows.to(torch.bfloat16).float().view(rows.shape[0], -1, GROUP)
    scale = x.abs().amax(dim=2) / 127.0
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.where(scale[..., None] > 0, x / safe[..., None], torch.zeros_like(x))
    return codes.round().clamp(-127, 127).view(rows.shape), scale


def reference(
    rows: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """What `w8a8_matmul(rows, tiled(codes), scale, bias)` returns, bit for bit, in torch
    (slow; for tests): integer dot products per group, float32 sums in group order."""
    a, a_scale = quantize_activations(rows)
    groups = a.shape[1] // GROUP
    a = a.to(torch.int64).view(a.shape[0], groups, GROUP)
    q = codes.to(torch.int64).view(codes.shape[0], groups, GROUP)
    total = torch.zeros(rows.shape[0], codes.shape[0], dtype=torch.float32)
    for g in range(groups):
        dot = (a[:, g] @ q[:, g].T).to(torch.float32)  # exact, then one rounding
        total = total + dot * a_scale[:, g : g + 1]
    total = total * scale
    return total + bias if bias is not None else total
