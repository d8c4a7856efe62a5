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

Built and loaded by kernels/build.py; where it cannot be (no compiler, no
AVX512-VNNI, not x86-64, or `DYNASPEC_W8A8_KERNEL=0`), `available()` is False and
`--quantize w8a8` says so.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import ScaledKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class W8a8Kernel(ScaledKernel):
    """int8 codes, activations quantized to int8 per token and group, AVX512-VNNI: the codes
    as q + 128 in unsigned bytes, tiles of 64 rows by column quads (a quad of 16 rows is one
    vector)."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="w8a8",
        # x, T, K, codes, scale, bias, N, y, threads, bf16
        argtypes=(_P, _I, _I, _P, _P, _P, _I, _P, _I, _I),
        cpu_flags=("avx512f", "avx512bw", "avx512_vnni"),
        bf16_out=True,
        use="--quantize w8a8 in bf16",
    )
    # any float layer: the kernel reads its rows in bf16
    MODE, DTYPES, INPUT = "w8a8", (torch.bfloat16, torch.float32, torch.float16), torch.bfloat16
    ROWS, COLUMNS = 64, 4
    WIDTH = GROUP = 128  # activation columns sharing one scale (csrc/w8a8_matmul.cpp)

    def tiled(self, codes: torch.Tensor) -> torch.Tensor:
        """(N, K) int8 codes as the kernel reads them: q + 128 as unsigned bytes, (N/64, K/4,
        64, 4)."""
        return super().tiled((codes.to(torch.int16) + 128).to(torch.uint8))

    def untiled(self, tiled_codes: torch.Tensor) -> torch.Tensor:
        """The (N, K) int8 codes back from `tiled(codes)`."""
        return (super().untiled(tiled_codes).to(torch.int16) - 128).to(torch.int8)

    def quantize_activations(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(codes (M, K) float32 integers in -127..127, scales (M, K/GROUP) float32), as the
        kernel computes them: per token and group, absmax / 127, round half to even."""
        x = rows.to(torch.bfloat16).float().view(rows.shape[0], -1, self.GROUP)
        scale = x.abs().amax(dim=2) / 127.0
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))
        codes = torch.where(scale[..., None] > 0, x / safe[..., None], torch.zeros_like(x))
        return codes.round().clamp(-127, 127).view(rows.shape), scale

    def reference(
        self,
        rows: torch.Tensor,
        codes: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """What `matmul(rows, tiled(codes), scale, bias)` returns, bit for bit, in torch
        (slow; for tests): integer dot products per group, float32 sums in group order."""
        a, a_scale = self.quantize_activations(rows)
        groups = a.shape[1] // self.GROUP
        a = a.to(torch.int64).view(a.shape[0], groups, self.GROUP)
        q = codes.to(torch.int64).view(codes.shape[0], groups, self.GROUP)
        total = torch.zeros(rows.shape[0], codes.shape[0], dtype=torch.float32)
        for g in range(groups):
            dot = (a[:, g] @ q[:, g].T).to(torch.float32)  # exact, then one rounding
            total = total + dot * a_scale[:, g : g + 1]
        total = total * scale
        return total + bias if bias is not None else total


KERNEL = W8a8Kernel()
