"""Refusing up front when memory is short (models/memory.py): a fake budget, the numbers in
the message, the fix in the caller's words, and nothing loaded before the refusal."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_model

import dynaspec
from dynaspec import batch, cli
from dynaspec import meminfo as meminfo_module
from dynaspec.backends.hf_batch import HFBatchAdapter
from dynaspec.backends.kernels import registry
from dynaspec.errors import InsufficientMemoryError
from dynaspec.models import loading, memory, presets

GB = memory.GB


def test_pair_need_counts_weights_in_the_dtype():
    need = memory.pair_need("p", torch.float32, ("t", 1_500_000_000), ("d", 500_000_000))
    assert need.total == 8 * GB + memory.OVERHEAD_BYTES
    half = memory.pair_need("p", torch.bfloat16, ("t", 1_500_000_000), ("d", 500_000_000))
    assert half.total == 4 * GB + memory.OVERHEAD_BYTES


def test_fast_path_holds_the_target_twice_at_its_peak():
    need = memory.pair_need(
        "p", torch.bfloat16, ("t", 1_000_000_000), ("d", 500_000_000), fast=True
    )
    assert need.total == 4 * GB + memory.OVERHEAD_BYTES
    assert "fast copy" in need.describe()


def test_a_quantized_fast_copy_counts_its_kernels_bytes_a_weight(monkeypatch):
    need = memory.pair_need(
        "p",
        torch.bfloat16,
        ("t", 1_000_000_000),
        ("d", 500_000_000),
        fast=True,
        copy_bytes_per_weight=0.625,
    )
    assert need.total == int(2.625 * GB) + memory.OVERHEAD_BYTES
    kernel = registry.matmul_kernel("int8", torch.float32)
    monkeypatch.setattr(kernel, "problem", lambda: None)
    assert registry.weight_bytes("int8", torch.float32) == 1.0
    assert registry.weight_bytes("int8", torch.float16) is None  # no kernel: torch's
    monkeypatch.setattr(kernel, "problem", lambda: "no C++ compiler")
    assert registry.weight_bytes("int8", torch.float32) is None  # torch's: the dtype's bytes


def test_load_pair_counts_the_quantized_copy_on_its_kernel(monkeypatch):
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    pair = presets.pair_presets()["qwen2.5-coder"]
    params = presets.model_presets()[pair.target].num_parameters
    enough = 4 * params + params + memory.OVERHEAD_BYTES  # float32 target + its int8 copy
    monkeypatch.setattr(memory, "available_bytes", lambda: enough)
    monkeypatch.setattr(registry.matmul_kernel("int8", torch.float32), "problem", lambda: None)

    def past_the_check(*args, **kwargs):
        raise LookupError("past the memory check")

    monkeypatch.setattr(loading.model_cache, "locate_slices", past_the_check)
    monkeypatch.setattr(loading.model_cache, "is_complete_folder", lambda folder: False)
    with pytest.raises(LookupError, match="past the memory check"):
        loading.load_pair("qwen2.5-coder", dtype="float32", quantize="int8")
    with pytest.raises(InsufficientMemoryError, match="fast copy"):  # a float32 copy
        loading.load_pair("qwen2.5-coder", dtype="float32", static=True)


def test_available_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683620 kB\nMemAvailable:    2000000 kB\n")
    assert meminfo_module.available_bytes(meminfo) == 2_048_000_000
    assert meminfo_module.available_bytes(tmp_path / "missing") is None


def test_check_refuses_with_both_figures_and_the_fixes(monkeypatch):
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    need = memory.pair_need("p", torch.float32, ("t", 1_500_000_000), ("d", 500_000_000))
    with pytest.raises(InsufficientMemoryError) as caught:
        memory.check_memory(need, fixes=["use less"], cli_fixes=["--less"], available=int(3 * GB))
    text = str(caught.value)
    assert "8.5 GB" in text and "3.0 GB available" in text and "use less" in text
    assert "--less" in caught.value.for_cli() and memory.SKIP_ENV in text
    memory.check_memory(need, available=int(9 * GB))  # enough: no error
    monkeypatch.setenv(memory.SKIP_ENV, "1")
    memory.check_memory(need, available=1)  # skipped on request


def test_load_pair_refuses_before_loading_anything(monkeypatch):
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: int(1 * GB))

    def never(*args, **kwargs):
        raise AssertionError("a model was looked for before the memory check")

    monkeypatch.setattr(loading.model_cache, "locate_slices", never)
    monkeypatch.setattr(loading, "load_preset", never)
    with pytest.raises(InsufficientMemoryError, match="qwen2.5-coder"):
        loading.load_pair("qwen2.5-coder", dtype="float32")


def test_the_cli_says_it_in_flags(monkeypatch, capsys):
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    monkeypatch.setattr(memory, "available_bytes", lambda: int(1 * GB))
    status = cli.main(["generate", "--pair", "qwen2.5-coder", "--dtype", "float32", "hi"])
    err = capsys.readouterr().err
    assert status != 0
    assert "--dtype bfloat16" in err and "1.0 GB available" in err


def test_a_batch_whose_caches_do_not_fit_is_refused_before_it_starts(monkeypatch):
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    target = tiny_model("llama")
    text = target.config
    per_token = HFBatchAdapter(target).bytes_per_token()
    head_dim = text.hidden_size // text.num_attention_heads
    assert per_token == 2 * text.num_hidden_layers * text.num_key_value_heads * head_dim * 4
    ids = torch.tensor([[0, 5, 6], [7, 8, 9]])
    mask = (ids != 0).long()
    need = 2 * (3 + 10) * per_token  # 2 rows of 3 prompt + 10 new tokens, the target alone
    monkeypatch.setattr(batch, "available_bytes", lambda: need - 1)

    def never(*args, **kwargs):
        raise AssertionError("the model ran before the memory check")

    monkeypatch.setattr(target, "forward", never)  # nothing may run before the refusal
    with pytest.raises(InsufficientMemoryError, match="2 rows of up to 13 tokens") as caught:
        dynaspec.generate(target, None, ids, attention_mask=mask, max_new_tokens=10)
    assert "max_new_tokens" in str(caught.value) and "--batch-size" in caught.value.for_cli()
    assert "the draft" not in str(caught.value)  # the target alone: one cache
    monkeypatch.undo()
    monkeypatch.setattr(batch, "available_bytes", lambda: need)  # just enough
    out = dynaspec.generate(target, None, ids, attention_mask=mask, max_new_tokens=10)
    assert out.sequences.shape == (2, 13)


def test_the_batch_check_counts_the_draft_and_can_be_skipped(monkeypatch):
    monkeypatch.delenv(memory.SKIP_ENV, raising=False)
    target = HFBatchAdapter(tiny_model("llama"))
    need = 4 * 100 * 2 * target.bytes_per_token()
    batch.check_cache_memory((target, target), 4, 100, available=need)  # fits
    with pytest.raises(InsufficientMemoryError, match=r"the target .* GB, the draft .* GB\)"):
        batch.check_cache_memory((target, target), 4, 100, available=need - 1)
    monkeypatch.setenv(memory.SKIP_ENV, "1")
    batch.check_cache_memory((target, target), 4, 100, available=1)
