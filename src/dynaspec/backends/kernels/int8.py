"""The int8 matmul for float32 activations on AVX2 (csrc/int8_matmul.cpp), built once.

torch's int8 kernels do not pay on a CPU without AVX512: measured on the 2-core AMD EPYC
(Zen 3, AVX2 only), one 1536 -> 8960 layer, milliseconds per call of T tokens:

    T                               1      2      4      8     16
    float32, oneDNN prepacked     4.1    4.7    5.6    7.2    8.6
    int8, torch._weight_int8pack  11.8   23.6   61.5  131.0  240.2
    int8, torch._int_mm (int8 x)  16.7   33.9   78.5  127.3  266.6

(the machine is noisy: +-30% between runs). This kernel reads each int8 code once per tile
of 8 rows, widens it to float32 in registers and uses it for 1-3 tokens at once. Ten 1536 ->
8960 and five 8960 -> 1536 layers (206 MB of codes, more than the caches), same machine,
milliseconds for all 15 (2 threads; float32 weights would be 823 MB, about 60 ms at the
memory's speed):

    T                               1      2      4      8     16
    int8, this kernel            16.3   21.6   27.8   41.7   73.0

A row of a T-token product is bitwise the one-token product (see the source).

Built and loaded by backends/kernel_build.py (once, with the system C++ compiler); where it
cannot be (no compiler, no AVX2/FMA, not x86-64, or `DYNASPEC_INT8_KERNEL=0`), `available()`
is False and int8 layers use torch's kernels.
"""

from __future__ import annotations

import ctypes

import torch

from dynaspec.backends.kernels.build import Kernel, KernelSpec, scaled_matmul

_P, _I = ctypes.c_void_p, ctypes.c_int
SPEC = KernelSpec(
    name="int8",
    argtypes=(_P, _I, _I, _P, _P, _P, _I, _P, _I),  # x, T, K, codes, scale, bias, N, y, threads
    cpu_flags=("avx2", "fma"),
    use="--quantize int8 in float32",
)
ENV_SWITCH = SPEC.switch  # "0": never use the kernel
KERNEL = Kernel(SPEC)


available = KERNEL.available  # whether it runs here (built at the first call)
unavailable_reason = KERNEL.unavailable_reason  # why not (None when it does)
readiness = KERNEL.readiness  # one line for `dynaspec models`, without building it


def supports(out_features: int, in_features: int) -> bool:
    """Whether a layer of these widths can use the kernel (tiles of 8 rows by 8 columns)."""
    return out_features % 8 == 0 and in_features % 8 == 0 and available()


def tiled(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 codes in the kernel's layout: tiles of 8 rows interleaved by 8 columns,
    (N/8, K/8, 8, 8), so that one tile is one sequential stream (see the source)."""
    rows, columns = codes.shape
    return codes.view(rows // 8, 8, columns // 8, 8).permute(0, 2, 1, 3).contiguous()


def untiled(tiled_codes: torch.Tensor) -> torch.Tensor:
    """The (N, K) codes back from `tiled(codes)`."""
    blocks, columns, _, _ = tiled_codes.shape
    return tiled_codes.permute(0, 2, 1, 3).reshape(blocks * 8, columns * 8)


@torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
def int8_matmul(
    rows: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """(rows (M, K) float32 @ q.T) * scale (N,) + bias (N,): (M, N) float32, where `codes` is
    `tiled(q)` for the int8 codes q (N, K)."""
    rows = rows.to(torch.float32).contiguous()
    return scaled_matmul(KERNEL, rows, codes, scale, bias, codes.shape[0] * 8)


matmul = int8_matmul  # what Int8Linear calls, whichever of the int8 kernels it holds
