"""The 4-bit matmul for bf16 activations on AVX512-BF16 (csrc/int4bf16_matmul.cpp), built once.

Weights w = q * s + m, a code q in 0..15 and a float16 scale s and offset m per row and
group of 32 columns (the same codes as the AVX2 int4 kernel, `int4_codes.quantize`): 0.625
bytes a weight, against bf16's 2 and int8's 1. torch's int4 kernel for bf16 does not batch.
This one multiplies the codes themselves, turned into bf16 by one table lookup, with
VDPBF16PS (csrc/bf16_tiles.h), and adds s times each group's sum and m times the group's sum
of the activations, so a verification over a few tokens costs about one step.
Measurements: docs/design/fast-path.md.

A row of a T-token product is bitwise the one-token product (see the source). Built and
loaded by kernels/build.py; where it cannot be (no compiler, no AVX512-BF16, not
x86-64, or `DYNASPEC_INT4BF16_KERNEL=0`), bf16 int4 layers use torch's int4 kernel.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import PackedKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class Int4Bf16Kernel(PackedKernel):
    """4-bit codes, bf16 activations, AVX512-BF16: tiles of 64 rows, groups of 32 columns."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="int4bf16",
        # x, T, K, codes, bias, N, y, threads, bf16
        argtypes=(_P, _I, _I, _P, _P, _I, _P, _I, _I),
        cpu_flags=("avx512f", "avx512bw", "avx512_bf16"),
        bf16_out=True,
        use="--quantize int4 in bf16",
    )
    MODE, DTYPES, INPUT = "int4", (torch.bfloat16,), torch.bfloat16
    ROWS, WIDTH = 64, 32

    def pack_tiles(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """The kernel's layout (see the source), (N/64, 4, K/32, 320) bytes: per tile of 64 rows,
        vector of 16 of them and group, the float16 s and m of its rows, then 4 lines of 32
        16-bit lanes, lane j (row j/2, column j%2 of a pair) of line c holding the codes of the
        group's column pairs 4c..4c+3 in its nibbles 0-3 (its temporaries take 4 bytes a
        weight)."""
        rows, columns = codes.shape
        tiles, groups = rows // self.ROWS, columns // self.GROUP
        # (tile, vector, row, group, line, nibble, column of the pair):
        # column = 8 line + 2 nibble + c
        q = codes.to(torch.int32).reshape(tiles, 4, 16, groups, 4, 4, 2)
        q = q.permute(0, 1, 3, 4, 2, 6, 5)  # (tile, vector, group, line, row, column, nibble)
        lanes = (q << torch.tensor([0, 4, 8, 12], dtype=torch.int32)).sum(-1)  # (..., 16, 2)
        body = lanes.to(torch.int16).reshape(tiles, 4, groups, 4 * 32).contiguous()
        header = torch.stack(
            [scale.reshape(tiles, 4, 16, groups), offset.reshape(tiles, 4, 16, groups)], 3
        )  # (tile, vector, row, 2, group) float16
        header = header.permute(0, 1, 4, 3, 2).contiguous()  # (tile, vector, group, 2, 16)
        parts = [header.view(torch.uint8).reshape(tiles, 4, groups, 64), body.view(torch.uint8)]
        return torch.cat(parts, -1).contiguous()


KERNEL = Int4Bf16Kernel()
