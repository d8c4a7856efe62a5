"""Refusing up front when memory is short (models/memory.py): a fake budget, the numbers in
the message, the fix in the caller's words, and nothing loaded before the refusal."""

from __future__ import annotations

import pytest
import torch

from dynaspec import cli
from dynaspec.errors import InsufficientMemoryError
from dynaspec.models import loading, memory

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


def test_available_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683620 kB\nMemAvailable:    2000000 kB\n")
    assert memory.available_bytes(meminfo) == 2_048_000_000
    assert memory.available_bytes(tmp_path / "missing") is None


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
