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
the source). Built and loaded by kernels/build.py; where it cannot be (no compiler,
no AVX512-BF16, not x86-64, or `DYNASPEC_INT8BF16_KERNEL=0`), `available()` is False and
bf16 int8 layers use torch's kernels and keep their bf16 codes.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import ScaledKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class Int8Bf16Kernel(ScaledKernel):
    """int8 codes, bf16 activations, AVX512-BF16: tiles of 64 rows, column pairs (a column pair
    of 16 rows is one vector)."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="int8bf16",
        # x, T, K, codes, scale, bias, N, y, threads, bf16
        argtypes=(_P, _I, _I, _P, _P, _P, _I, _P, _I, _I),
        cpu_flags=("avx512f", "avx512bw", "avx512_bf16"),
        bf16_out=True,
        use="--quantize int8 in bf16",
    )
    MODE, DTYPES, INPUT = "int8", (torch.bfloat16,), torch.bfloat16
    ROWS, COLUMNS, WIDTH = 64, 2, 2


KERNEL = Int8Bf16Kernel()
