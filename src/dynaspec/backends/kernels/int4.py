"""The 4-bit matmul for float32 activations on AVX2 (csrc/int4_matmul.cpp), built once.

The codes are int4_codes.py's (w = q * s + m, 0.625 bytes a weight). A decoding step reads
every weight once, so one token costs less than on the int8 kernel; decoding the codes costs
arithmetic, which a pass over the codes shares among up to 6 tokens. Ten 1536 -> 8960 and
five 8960 -> 1536 layers (129 MB of codes and scales), 2-core AMD EPYC (Zen 3, AVX2 only),
2 threads, milliseconds for all 15, best of 5, the int8 kernel on the same layers in the
same run (the machine is noisy, +-20% between runs):

    T                               1      2      3      4      6      8     16
    int8, dynaspec's kernel        12.4   16.7   19.5   21.1   27.6   37.2   75.1
    int4, this kernel              11.5   12.4   17.5   18.6   24.5   37.1   81.7

A row of a T-token product is bitwise the one-token product (see the source). Built and
loaded by kernels/build.py; where it cannot be (no compiler, no AVX2/FMA/F16C, not
x86-64, or `DYNASPEC_INT4_KERNEL=0`), int4 layers use torch's int4 kernel.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import PackedKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class Int4Kernel(PackedKernel):
    """4-bit codes, float32 activations, AVX2: tiles of 8 rows."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="int4",
        # x, T, K, codes, G, bias, N, scratch, y, threads
        argtypes=(_P, _I, _I, _P, _I, _P, _I, _P, _P, _I),
        cpu_flags=("avx2", "fma", "f16c"),
        use="--quantize int4 in float32",
    )
    MODE, DTYPES, INPUT = "int4", (torch.float32,), torch.float32
    ROWS, WIDTH = 8, 32

    def pack_tiles(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """The kernel's layout (see the source), (N/8, K/group, 32 + 4 * group) bytes: per tile
        of 8 rows, group by group, the float16 scales and offsets of its rows, then a 32-bit
        word a row and chunk of 8 columns, column k in bits 4k..4k+3."""
        rows, columns = codes.shape
        groups = scale.shape[1]
        group = columns // groups
        # (tile, row, group, chunk, byte, nibble): column = chunk * 8 + byte * 2 + nibble
        v = codes.reshape(rows // 8, 8, groups, group // 8, 4, 2)
        # (tile, group, chunk, row, 4)
        words = (v[..., 0] | (v[..., 1] << 4)).permute(0, 2, 3, 1, 4)
        body = words.reshape(rows // 8, groups, 4 * group)
        header = torch.stack(
            [scale.reshape(rows // 8, 8, groups), offset.reshape(rows // 8, 8, groups)], 1
        )
        header = header.permute(0, 3, 1, 2).contiguous().view(torch.uint8)  # (tile, group, 2, 16)
        return torch.cat([header.reshape(rows // 8, groups, 32), body], -1).contiguous()

    @torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
    def matmul(
        self,
        rows: torch.Tensor,
        codes: torch.Tensor,
        group: int,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """rows (M, K) float32 @ w.T + bias (N,): (M, N) float32, where `codes` is `packed(...)`
        of the weights w (N, K) in groups of `group` columns."""
        function = self.runnable()
        if out_dtype != torch.float32:
            raise ValueError(f"the int4 kernel writes float32 only, not {out_dtype}")
        rows = rows.to(torch.float32).contiguous()
        tokens, columns = rows.shape
        num_out = codes.shape[0] * 8
        out = torch.empty(tokens, num_out, dtype=torch.float32)
        scratch = torch.empty(tokens * (columns // group), dtype=torch.float32)  # groups' sums
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


KERNEL = Int4Kernel()
