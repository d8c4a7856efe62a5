"""4-bit weights and int8 activations on AVX512-VNNI (csrc/w4a8_matmul.cpp), built once:
the 4-bit layers of `--quantize w4a8`.

The weights are the int4 target's (`int4_codes.quantize`: w = q * s + m, q in 0..15, float16
s and m per row and group of 32 columns, 0.625 bytes a weight, cached like the int4 layers);
the activations are quantized per token and group of 128 columns as `w8a8.py` does, and
the products run in integers with VPDPBUSD. Layers finer than 4 bits (above
`quant.INT4_TOLERANCE`) go to `w8a8.py`, so every layer of a w4a8 model sees the same
quantized activations. A row of a T-token product is bitwise the one-token product;
`reference` computes the same bits in torch. Where it cannot run (no compiler, no
AVX512-VNNI, not x86-64, or `DYNASPEC_W4A8_KERNEL=0`), `--quantize w4a8` says so.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels import w8a8
from dynaspec.backends.kernels.base import PackedKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class W4a8Kernel(PackedKernel):
    """4-bit codes, activations quantized to int8 as w8a8's, AVX512-VNNI: tiles of 64 rows;
    activation groups of 128 columns."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="w4a8",
        # x, T, K, packed, bias, N, y, threads, bf16
        argtypes=(_P, _I, _I, _P, _P, _I, _P, _I, _I),
        cpu_flags=("avx512f", "avx512bw", "avx512_vnni"),
        bf16_out=True,
        use="--quantize w4a8 in bf16",
    )
    # any float layer: the kernel reads its rows in bf16
    MODE, DTYPES, INPUT = "w4a8", (torch.bfloat16, torch.float32, torch.float16), torch.bfloat16
    ROWS, WIDTH = 64, w8a8.KERNEL.GROUP

    def pack_tiles(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """The kernel's layout, (N/64, K/32, 1280) bytes: per tile of 64 rows and group of 32
        columns, the codes as 4 column quad pairs x 4 vectors of 16 rows x 64 bytes (byte 4i + c:
        row i, low nibble column 8j + c, high nibble column 8j + 4 + c of quad pair j), then the
        64 rows' s, then their m (float16)."""
        rows, columns = codes.shape
        tiles, groups = rows // self.ROWS, columns // self.GROUP
        # (tile, vector, row, group, pair j, nibble, column c): column = 8 j + 4 nibble + c
        q = codes.reshape(tiles, 4, 16, groups, 4, 2, 4)
        q = q.permute(0, 3, 4, 1, 2, 6, 5)  # (tile, group, j, vector, row, c, nibble)
        body = (q[..., 0] | (q[..., 1] << 4)).reshape(tiles, groups, self.ROWS * self.GROUP // 2)
        header = torch.stack(
            [scale.reshape(tiles, self.ROWS, groups), offset.reshape(tiles, self.ROWS, groups)]
        )
        header = header.permute(1, 3, 0, 2).contiguous()  # (tile, group, s or m, row) float16
        parts = [body, header.view(torch.uint8).reshape(tiles, groups, self.ROWS * 4)]
        return torch.cat(parts, -1).contiguous()

    def reference(
        self,
        rows: torch.Tensor,
        codes: torch.Tensor,
        scale: torch.Tensor,
        offset: torch.Tensor,
        bias: torch.Tensor | None,
    ) -> torch.Tensor:
        """What `matmul(rows, packed(codes, scale, offset), 32, bias)` returns, bit for bit,
        in torch (slow; for tests): per weight group, (sum a q * s + m * sum a) * A added in
        group order, A the activation scale of the group's 128 columns."""
        a, a_scale = w8a8.KERNEL.quantize_activations(rows)
        groups = codes.shape[1] // self.GROUP
        a = a.to(torch.int64).view(a.shape[0], groups, self.GROUP)
        q = codes.to(torch.int64).view(codes.shape[0], groups, self.GROUP)
        total = torch.zeros(rows.shape[0], codes.shape[0], dtype=torch.float32)
        per = w8a8.KERNEL.GROUP // self.GROUP  # weight groups an activation group
        for g in range(groups):
            dot = (a[:, g] @ q[:, g].T).to(torch.float32)
            sum_a = a[:, g].sum(dim=1, keepdim=True).to(torch.float32)
            s, m = scale[:, g].float(), offset[:, g].float()
            group = dot * s + m * sum_a
            total = total + group * a_scale[:, g // per : g // per + 1]
        return total + bias if bias is not None else total


KERNEL = W4a8Kernel()
