"""A bf16 linear layer whose every row is bitwise the same whatever the number of rows it
runs with (the static path's bf16 layers: `static=True` in bf16; backends/kernels/bf16.py).

With it a target's verification over k + 1 tokens computes the logits its k + 1 steps would,
bit for bit, so greedy speculative output equals the target alone's token for token, ties
included. It holds its weight once, in the kernel's tiled layout (as many bytes as the
prepacked copy it replaces).
"""

from __future__ import annotations

import torch
from torch import nn

from dynaspec.backends.kernels.bf16 import KERNEL as BF16


def fits(linear: nn.Module) -> bool:
    """Whether `linear` (a bf16 nn.Linear on the CPU) can run on the kernel here (builds it
    at the first call)."""
    weight = getattr(linear, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return False
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
        return False
    return BF16.supports(*weight.shape)


class BitExactLinear(nn.Module):
    """y = x @ w.T + bias in bf16, each row summed in one fixed order (kernels/bf16.py)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach()
        self.register_buffer("weight", BF16.tiled(weight), persistent=False)
        bias = linear.bias
        # float32, added to each float32 sum before its one rounding to bf16
        float_bias = None if bias is None else bias.detach().to(torch.float32, copy=True)
        self.register_buffer("bias", float_bias, persistent=False)
        self.in_features = weight.shape[1]
        self.out_features = weight.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (M, K)
        out = BF16.matmul(rows, self.weight, self.bias)  # (M, N) bf16
        return out.reshape(*x.shape[:-1], self.out_features)

    def dense_weight(self) -> torch.Tensor:
        """The (N, K) bf16 weight, out of the kernel's layout."""
        return BF16.untiled(self.weight)
