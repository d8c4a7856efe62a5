"""The int8 matmul for bf16 activations on AVX512-BF16 (csrc/int8bf16_matmul.cpp), built once.

torch's int8 kernel for bf16 activations (`torch._weight_int8pack_mm`) reads half of bf16's
bytes for one token but does not batch, which is why an int8 target used to keep a second,
bf16 copy of its codes to verify with (backends/quant.py). This kernel widens the codes to
bf16 in registers and multiplies them with VDPBF16PS, so one token reads 1 byte a weight and
a verification over 8 tokens costs about what the dense bf16 kernel does. Ten 1536 -> 8960
and five 8960 -> 1536 layers (206 M weights), 2-core AMD EPYC (Zen 4, AVX512-BF16), 2
threads, milliseconds for all 15, best of 15 calls, interleaved in one process (the machine
is noisy: +-20% between runs):

    T                                  1      2      4      5      6      8     12     16
    bf16, oneDNN prepacked          18.8   19.6   17.7   15.7   14.7   18.9   21.1   21.6
    int8, torch._weight_int8pack    11.5   14.3   16.8   26.0   25.4   30.8   47.3   57.7
    int8, this kernel                8.0    8.4    9.2    8.0   13.3   14.9   18.0   23.8

(`_weight_int8pack` above 4 tokens: its codes converted to bf16 on each call, as a draft
does; a target kept them.) A row of a T-token product is bitwise the one-token product (see
the source). Built and loaded by backends/kernel_build.py; where it cannot be (no compiler,
no AVX512-BF16, not x86-64, or `DYNASPEC_INT8BF16_KERNEL=0`), `available()` is False and
bf16 int8 layers use torch's kernels and keep their bf16 codes.
"""

from __future__ import annotations

import ctypes

import torch

from dynaspec.backends.kernels.build import Kernel, KernelSpec, scaled_matmul

_P, _I = ctypes.c_void_p, ctypes.c_int
SPEC = KernelSpec(
    name="int8bf16",
    # x, T, K, codes, scale, bias, N, y, threads, bf16
    argtypes=(_P, _I, _I, _P, _P, _P, _I, _P, _I, _I),
    cpu_flags=("avx512f", "avx512bw", "avx512_bf16"),
    bf16_out=True,
    use="--quantize int8 in bf16",
)
ENV_SWITCH = SPEC.switch  # "0": never use the kernel
KERNEL = Kernel(SPEC)
ROWS = 64  # rows a tile of the layout

available = KERNEL.available  # whether it runs here (built at the first call)
unavailable_reason = KERNEL.unavailable_reason  # why not (None when it does)
readiness = KERNEL.readiness  # one line for `dynaspec models`, without building it


def supports(out_features: int, in_features: int) -> bool:
    """Whether a layer of these widths can use the kernel (tiles of 64 rows, column pairs)."""
    return out_features % ROWS == 0 and in_features % 2 == 0 and available()


def tiled(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 codes in the kernel's layout, (N/64, K/2, 64, 2): a tile of 64 rows is one
    sequential stream, a column pair of 16 rows one vector (see the source)."""
    rows, columns = codes.shape
    return codes.view(rows // ROWS, ROWS, columns // 2, 2).permute(0, 2, 1, 3).contiguous()


def untiled(tiled_codes: torch.Tensor) -> torch.Tensor:
    """The (N, K) codes back from `tiled(codes)`."""
    tiles, pairs, _, _ = tiled_codes.shape
    return tiled_codes.permute(0, 2, 1, 3).reshape(tiles * ROWS, pairs * 2)


@torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
def int8_bf16_matmul(
    rows: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(rows (M, K) bf16 @ q.T) * scale (N,) + bias (N,): (M, N) out_dtype, where `codes` is
    `tiled(q)` for the int8 codes q (N, K) and `scale`, `bias` are float32."""
    rows = rows.to(torch.bfloat16).contiguous()
    return scaled_matmul(KERNEL, rows, codes, scale, bias, codes.shape[0] * ROWS, out_dtype)


matmul = int8_bf16_matmul  # what Int8Linear calls, whichever of the int8 kernels it holds
