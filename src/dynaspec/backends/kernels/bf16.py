"""A bf16 product whose rows do not depend on how many rows it runs with
(csrc/bf16_matmul.cpp, AVX512-BF16), built once: the static path's bf16 layers
(backends/exact_linear.py).

oneDNN's bf16 product (`F.linear`, and the prepacked weights oneDNN reorders once) chooses its
blocking, and so the order in which it sums a row's products, from the number of rows: on
the 2-core AVX512-BF16 EPYC a row of a 2-10 row product over K = 1536 differs from the same
row alone in the last bit. A target's verification over k + 1 tokens then sees other logits
than its steps would, and where its two best lie within a bf16 step the argmax flips:
speculative output parts from the target alone's at a tie. This kernel sums each row's K
products in one fixed order (column pairs in column order, one float32 accumulator lane,
the bias last) whatever the number of rows, the other rows or the threads, so a
verification's logits are its steps' bit for bit (the batch-invariance idea: Thinking
Machines, "Defeating Nondeterminism in LLM Inference", 2025).

Where it cannot be built (no compiler, no AVX512-BF16, not x86-64, `DYNASPEC_BF16_KERNEL=0`)
or a layer does not fit it (output width not a multiple of 64, odd input width), bf16
layers keep oneDNN's prepacked product, bit-exact up to ties only.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import CompiledKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class Bf16Kernel(CompiledKernel):
    """bf16 weights and activations, AVX512-BF16: tiles of 64 rows, column pairs (a column
    pair of 16 rows is one vector), each row summed in one order for any row count."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="bf16",
        # x, T, K, weights, bias, N, y, threads, bf16
        argtypes=(_P, _I, _I, _P, _P, _I, _P, _I, _I),
        cpu_flags=("avx512f", "avx512bw", "avx512_bf16"),
        bf16_out=True,
        use="bit-exact bf16 layers of --static",
    )
    ROWS = 64  # output rows a tile of the layout (the output width's multiple)

    def fits(self, out_features: int, in_features: int) -> bool:
        """Whether a layer of these widths fits the layout, without building the kernel."""
        return out_features % self.ROWS == 0 and in_features % 2 == 0

    def supports(self, out_features: int, in_features: int) -> bool:
        """Whether a layer of these widths can use the kernel (builds it at the first call)."""
        return self.fits(out_features, in_features) and self.available()

    def tiled(self, weight: torch.Tensor) -> torch.Tensor:
        """(N, K) weights in the kernel's layout, bf16 (N/64, K/2, 64, 2): a tile of 64 rows
        is one sequential stream, a column pair of 16 rows one vector."""
        rows, columns = weight.shape
        tiles = weight.to(torch.bfloat16).view(rows // self.ROWS, self.ROWS, columns // 2, 2)
        return tiles.permute(0, 2, 1, 3).contiguous()

    def untiled(self, tiled_weight: torch.Tensor) -> torch.Tensor:
        """The (N, K) weights back from `tiled(weight)`."""
        tiles, pairs, _, _ = tiled_weight.shape
        return tiled_weight.permute(0, 2, 1, 3).reshape(tiles * self.ROWS, pairs * 2)

    @torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
    def matmul(
        self,
        rows: torch.Tensor,
        weights: torch.Tensor,
        bias: torch.Tensor | None = None,
        out_dtype: torch.dtype = torch.bfloat16,
    ) -> torch.Tensor:
        """rows (M, K) @ w.T + bias (N,) float32: (M, N) `out_dtype` (bf16: each float32
        sum rounded once, to nearest even; or float32), where `weights` is `tiled(w)`; row i
        is bitwise `matmul(rows[i:i+1], ...)[0]`."""
        function = self.runnable()
        if out_dtype not in (torch.bfloat16, torch.float32):
            raise ValueError(f"the bf16 kernel writes bf16 or float32, not {out_dtype}")
        rows = rows.to(torch.bfloat16).contiguous()
        out = torch.empty(rows.shape[0], weights.shape[0] * self.ROWS, dtype=out_dtype)
        function(
            rows.data_ptr(),
            rows.shape[0],
            rows.shape[1],
            weights.data_ptr(),
            None if bias is None else bias.data_ptr(),
            out.shape[1],
            out.data_ptr(),
            torch.get_num_threads(),
            int(out_dtype == torch.bfloat16),
        )
        return out


def reference(
    rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The exact product in float64 (M, N), for closeness tests (the kernel rounds each
    pair's sum, and its output to bf16)."""
    out = rows.double() @ weight.double().T
    return out if bias is None else out + bias.double()


KERNEL = Bf16Kernel()
