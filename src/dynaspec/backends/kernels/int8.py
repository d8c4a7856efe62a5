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

Built and loaded by kernels/build.py (once, with the system C++ compiler); where it
cannot be (no compiler, no AVX2/FMA, not x86-64, or `DYNASPEC_INT8_KERNEL=0`), `available()`
is False and int8 layers use torch's kernels.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import ScaledKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class Int8Kernel(ScaledKernel):
    """int8 codes, float32 activations, AVX2: tiles of 8 rows by 8 columns."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="int8",
        argtypes=(_P, _I, _I, _P, _P, _P, _I, _P, _I),  # x, T, K, codes, scale, bias, N, y, threads
        cpu_flags=("avx2", "fma"),
        use="--quantize int8 in float32",
    )
    MODE, DTYPES, INPUT = "int8", (torch.float32,), torch.float32
    ROWS = COLUMNS = WIDTH = 8


KERNEL = Int8Kernel()
