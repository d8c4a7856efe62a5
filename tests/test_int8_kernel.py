"""dynaspec's int8 matmul for float32 activations (backends/kernels/int8.py): what it computes,
that a row of a many-token product is bitwise the one-token product (so a verification sees
the logits of a step), that int8 layers use it without keeping dense codes, and that it
stands aside, with the reason, where it cannot be built."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from dynaspec.backends.kernels.build import cpu_has
from dynaspec.backends.kernels.int8 import KERNEL as int8_kernel
from dynaspec.backends.quant import Int8Linear

needs_kernel = pytest.mark.skipif(
    not int8_kernel.available(), reason=f"int8 kernel: {int8_kernel.unavailable_reason()}"
)


def _problem(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(-127, 128, (rows, columns), dtype=torch.int8, generator=generator)
    scale = torch.rand(rows, generator=generator) / 64
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(tokens, columns, generator=generator)
    return codes, scale, bias, x


@needs_kernel
@pytest.mark.parametrize("rows,columns", [(8, 8), (64, 1536), (264, 96), (40, 8960)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_computes_the_scaled_int8_product(rows, columns, with_bias) -> None:
    codes, scale, bias, x = _problem(rows, columns, tokens=7)
    bias = bias if with_bias else None
    out = int8_kernel.matmul(x, int8_kernel.tiled(codes), scale, bias)
    expected = x.double() @ codes.double().T * scale.double()
    if bias is not None:
        expected = expected + bias.double()
    assert out.shape == (7, rows) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)


@needs_kernel
def test_a_row_of_many_tokens_is_bitwise_the_one_token_product() -> None:
    codes, scale, bias, x = _problem(72, 1536, tokens=19, seed=3)
    tiled = int8_kernel.tiled(codes)
    singles = torch.cat([int8_kernel.matmul(x[i : i + 1], tiled, scale, bias) for i in range(19)])
    for tokens in range(1, 20):  # every tiling of the tokens: 3 at a time, then 2 or 1
        many = int8_kernel.matmul(x[:tokens], tiled, scale, bias)
        assert torch.equal(many, singles[:tokens]), tokens


def test_the_tiled_layout_interleaves_eight_rows_by_eight_columns() -> None:
    codes = torch.arange(16 * 24, dtype=torch.int32).remainder(127).to(torch.int8).view(16, 24)
    tiled = int8_kernel.tiled(codes)
    assert tiled.shape == (2, 3, 8, 8)
    # tile 1, column block 2, row 5 of the tile: row 13, columns 16..23
    assert torch.equal(tiled[1, 2, 5], codes[13, 16:24])
    assert torch.equal(int8_kernel.untiled(tiled), codes)


@needs_kernel
def test_int8_layers_use_the_kernel_in_float32_and_keep_no_dense_codes() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(64, 48)
    quantized = Int8Linear(layer.weight.detach(), layer.bias, dense_batches=True)
    assert quantized.kernel and quantized.codes is None
    x = torch.randn(2, 5, 64)
    codes = quantized.int8_codes()
    assert torch.equal(codes, torch.round(layer.weight / quantized.scale[:, None]).to(torch.int8))
    expected = (x.double() @ codes.double().T) * quantized.scale.double() + layer.bias.double()
    torch.testing.assert_close(quantized(x).double(), expected, rtol=1e-5, atol=1e-5)
    copied = copy.deepcopy(quantized)  # a copy of the layer shares the one kernel
    assert copied.kernel is int8_kernel and torch.equal(copied(x), quantized(x))
    # a layer whose width is not a multiple of 8 keeps torch's kernels
    odd = nn.Linear(60, 48)
    assert not Int8Linear(odd.weight.detach(), odd.bias).kernel


def test_without_the_kernel_int8_layers_use_torchs_kernels(monkeypatch) -> None:
    monkeypatch.setattr(int8_kernel, "state", {"function": None, "reason": "switched off"})
    assert not int8_kernel.available()
    assert int8_kernel.unavailable_reason() == "switched off"
    layer = nn.Linear(64, 48)
    quantized = Int8Linear(layer.weight.detach(), layer.bias, dense_batches=True)
    assert not quantized.kernel and quantized.weight.shape == (48, 64)
    assert quantized(torch.randn(3, 64)).shape == (3, 48)
    with pytest.raises(RuntimeError, match="switched off"):
        int8_kernel.matmul(torch.randn(1, 64), quantized.weight, quantized.scale, None)


def test_the_switch_and_a_failing_compiler_are_reported(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(int8_kernel.SPEC.switch, "0")
    assert int8_kernel.load() == (None, f"{int8_kernel.SPEC.switch}=0")
    monkeypatch.delenv(int8_kernel.SPEC.switch)
    if not cpu_has("avx2", "fma"):
        pytest.skip("this CPU has no AVX2/FMA: the compiler is never asked")
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    function, reason = int8_kernel.load()
    assert function is None and "false failed on int8_matmul.cpp" in reason


def test_readiness_says_why_without_building(monkeypatch) -> None:
    monkeypatch.setattr(int8_kernel, "state", {})
    monkeypatch.setenv(int8_kernel.SPEC.switch, "0")
    line = int8_kernel.readiness()
    assert "not used" in line and f"{int8_kernel.SPEC.switch}=0" in line
    assert int8_kernel.state == {}  # nothing was built or cached
    monkeypatch.setattr(int8_kernel, "state", {"function": object(), "reason": None})
    assert int8_kernel.readiness().endswith("built")
