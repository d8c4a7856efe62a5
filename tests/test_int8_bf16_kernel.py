"""dynaspec's int8 matmul for bf16 activations (backends/kernels/int8_bf16.py): what it
computes, that a row of a many-token product is bitwise the one-token product whatever path
the token count takes (so a verification sees the logits of a step), that bf16 int8 layers
use it without keeping bf16 codes, that a speculative int8 bf16 target gives its own output
token for token, and that it stands aside, with the reason, where it cannot be built."""

from __future__ import annotations

import pytest
import torch
from tiny_models import assert_speculative_equals_alone, bf16_llama_pair, random_prompts
from torch import nn

from dynaspec.backends.kernels.build import KernelSpec, cpu_has
from dynaspec.backends.kernels.int8_bf16 import KERNEL as kernel
from dynaspec.backends.quant import Int8Linear
from dynaspec.backends.static import make_fast

needs_kernel = pytest.mark.skipif(
    not kernel.available(), reason=f"int8 bf16 kernel: {kernel.unavailable_reason()}"
)


def _problem(rows: int, columns: int, tokens: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    codes = torch.randint(-127, 128, (rows, columns), dtype=torch.int8, generator=generator)
    scale = torch.rand(rows, generator=generator) / 64
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(tokens, columns, generator=generator).to(torch.bfloat16)
    return codes, scale, bias, x


@needs_kernel
@pytest.mark.parametrize("rows,columns", [(64, 2), (64, 130), (128, 1536), (192, 8960)])
@pytest.mark.parametrize("tokens", [1, 4, 9])  # in registers, in registers, by blocks
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_kernel_computes_the_scaled_int8_product(rows, columns, tokens, with_bias) -> None:
    codes, scale, bias, x = _problem(rows, columns, tokens)
    bias = bias if with_bias else None
    out = kernel.matmul(x, kernel.tiled(codes), scale, bias)
    expected = x.double() @ codes.double().T * scale.double()
    if bias is not None:
        expected = expected + bias.double()
    assert out.shape == (tokens, rows) and out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-4)


@needs_kernel
@pytest.mark.parametrize("columns", [96, 300])  # one block of columns; three, the last short
def test_a_row_of_many_tokens_is_bitwise_the_one_token_product(columns) -> None:
    codes, scale, bias, x = _problem(128, columns, tokens=53, seed=3)
    tiled = kernel.tiled(codes)
    singles = torch.cat([kernel.matmul(x[i : i + 1], tiled, scale, bias) for i in range(53)])
    # up to 5 tokens in registers; more by blocks, 6 at a time, 24 a pass over the codes
    for tokens in (*range(1, 32), 47, 48, 49, 53):
        many = kernel.matmul(x[:tokens], tiled, scale, bias)
        assert torch.equal(many, singles[:tokens]), tokens


def test_the_tiled_layout_pairs_columns_of_sixty_four_rows() -> None:
    codes = torch.arange(128 * 6, dtype=torch.int32).remainder(127).to(torch.int8).view(128, 6)
    tiled = kernel.tiled(codes)
    assert tiled.shape == (2, 3, 64, 2)
    # tile 1, column pair 2, row 5 of the tile: row 69, columns 4 and 5
    assert torch.equal(tiled[1, 2, 5], codes[69, 4:6])
    assert torch.equal(kernel.untiled(tiled), codes)


@needs_kernel
def test_bf16_int8_layers_use_the_kernel_and_keep_no_bf16_codes() -> None:
    torch.manual_seed(0)
    layer = nn.Linear(96, 128).to(torch.bfloat16)
    quantized = Int8Linear(layer.weight.detach(), layer.bias, dense_batches=True, prepack=True)
    assert quantized.kernel is kernel and quantized.codes is None
    assert quantized.scale.dtype == torch.float32  # the bf16-rounded scale, held in float32
    x = torch.randn(2, 5, 96).to(torch.bfloat16)
    codes = quantized.int8_codes()
    expected = x.double() @ codes.double().T * quantized.scale.double() + layer.bias.double()
    out = quantized(x)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 5, 128)
    torch.testing.assert_close(out.double(), expected, rtol=1e-2, atol=1e-2)
    # a layer whose rows are not a multiple of 64 keeps torch's kernels (and, for a
    # target, its bf16 codes)
    odd = nn.Linear(96, 48).to(torch.bfloat16)
    assert not Int8Linear(odd.weight.detach(), odd.bias, dense_batches=True).kernel


@needs_kernel
@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
def test_a_bf16_int8_target_speculative_equals_itself_alone(schedule: str) -> None:
    target, draft = bf16_llama_pair()
    fast_target = make_fast(target, quantize="int8")
    layers = [m for m in fast_target.decoder.modules() if isinstance(m, Int8Linear)]
    assert layers and all(m.kernel is kernel for m in layers)  # every layer on the kernel
    fast_draft = make_fast(draft, quantize="int8")
    prompts = random_prompts(3, 128, seed=4)
    assert_speculative_equals_alone(
        fast_target,
        fast_draft,
        prompts,
        num_assistant_tokens=7,
        num_assistant_tokens_schedule=schedule,
    )


def test_without_the_kernel_bf16_int8_layers_keep_torchs_kernels(monkeypatch) -> None:
    monkeypatch.setattr(kernel, "state", {"function": None, "reason": "switched off"})
    assert not kernel.available() and kernel.unavailable_reason() == "switched off"
    layer = nn.Linear(64, 128).to(torch.bfloat16)
    quantized = Int8Linear(layer.weight.detach(), layer.bias, dense_batches=True)
    assert not quantized.kernel and quantized.codes is not None  # verifies with bf16 codes
    assert quantized(torch.randn(6, 64).to(torch.bfloat16)).shape == (6, 128)
    with pytest.raises(RuntimeError, match="switched off"):
        kernel.matmul(torch.randn(1, 64), quantized.weight, quantized.scale, None)


def test_the_compiler_flags_drop_cpuinfos_underscores(monkeypatch, tmp_path) -> None:
    assert kernel.SPEC.flags[-3:] == ("-mavx512f", "-mavx512bw", "-mavx512bf16")
    assert KernelSpec("x", (), ("avx2", "f16c"), "").flags[-2:] == ("-mavx2", "-mf16c")
    monkeypatch.setenv(kernel.SPEC.switch, "0")
    assert kernel.SPEC.switch == "DYNASPEC_INT8BF16_KERNEL"
    assert kernel.load() == (None, f"{kernel.SPEC.switch}=0")
    monkeypatch.delenv(kernel.SPEC.switch)
    if not cpu_has("avx512f", "avx512bw", "avx512_bf16"):
        assert "AVX512_BF16" in kernel.problem()
        return
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    function, reason = kernel.load()
    assert function is None and "false failed on int8bf16_matmul.cpp" in reason
