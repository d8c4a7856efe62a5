"""The bf16-activation kernels (int8, w8a8, w4a8) write bf16 themselves for bf16
layers: bit for bit what converting their float32 output gives (torch's rounding, to
nearest, ties to even, NaN as 0xFFFF, infinities kept), and quantized layers use it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dynaspec.backends.kernels.int8_bf16 import KERNEL as int8_bf16_kernel
from dynaspec.backends.kernels.w4a8 import KERNEL as w4a8_kernel
from dynaspec.backends.kernels.w8a8 import KERNEL as w8a8_kernel
from dynaspec.backends.quant import quantize_linear

ROWS, COLUMNS = 128, 256


def _operands(module):
    generator = torch.Generator().manual_seed(0)
    if module in (int8_bf16_kernel, w8a8_kernel):
        codes = torch.randint(-127, 128, (ROWS, COLUMNS), dtype=torch.int8, generator=generator)
        scale = torch.rand(ROWS, generator=generator) / 64
        return (module.tiled(codes), scale)
    codes = torch.randint(0, 16, (ROWS, COLUMNS), dtype=torch.uint8, generator=generator)
    scale = (torch.rand(ROWS, COLUMNS // 32, generator=generator) / 64).half()
    offset = (torch.randn(ROWS, COLUMNS // 32, generator=generator) / 64).half()
    return (module.packed(codes, scale, offset), 32)


@pytest.mark.parametrize(
    "module",
    [int8_bf16_kernel, w8a8_kernel, w4a8_kernel],
    ids=lambda m: m.SPEC.name,
)
@pytest.mark.parametrize("tokens", [1, 3, 8])
def test_bf16_output_is_the_converted_float32_output(module, tokens) -> None:
    if not module.available():
        pytest.skip(f"{module.SPEC.name}: {module.unavailable_reason()}")
    x = torch.randn(tokens, COLUMNS).to(torch.bfloat16)
    x[0, :3] = torch.tensor([1e38, -1e38, 3e38])  # some outputs overflow to infinities
    if tokens > 1:
        x[1, 5] = float("nan")  # a NaN input: its row is NaN
    bias = torch.randn(ROWS)
    wide = module.matmul(x, *_operands(module), bias)
    narrow = module.matmul(x, *_operands(module), bias, out_dtype=torch.bfloat16)
    assert wide.dtype == torch.float32 and narrow.dtype == torch.bfloat16
    assert torch.equal(wide.to(torch.bfloat16).view(torch.int16), narrow.view(torch.int16))


@pytest.mark.parametrize("mode", ["int8", "w8a8"])
def test_bf16_quantized_layers_ask_for_bf16(mode, monkeypatch) -> None:
    kernel = int8_bf16_kernel if mode == "int8" else w8a8_kernel
    if not kernel.available():
        pytest.skip(f"{mode}: {kernel.unavailable_reason()}")
    asked = []
    original = kernel.matmul

    def spy(*args, **kwargs):
        asked.append(kwargs.get("out_dtype", torch.float32))
        return original(*args, **kwargs)

    layer = quantize_linear(nn.Linear(COLUMNS, ROWS).to(torch.bfloat16), mode)
    monkeypatch.setattr(kernel, "matmul", spy)
    assert layer(torch.randn(2, COLUMNS).to(torch.bfloat16)).dtype == torch.bfloat16
    assert asked == [torch.bfloat16]
