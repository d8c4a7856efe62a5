"""`dynaspec bench --batch`: every method on the same batches, throughput per batch size,
every dynaspec method's rows equal to transformers' batched greedy output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dynaspec.cli import main
from dynaspec.errors import ConfigError
from dynaspec.eval.bench.batch import (
    DEFAULT_BATCH_METHODS,
    new_token_count,
    parse_batch_methods,
    parse_batch_sizes,
)


def test_smoke_run_writes_a_record_per_method_and_batch(tmp_path: Path, capsys) -> None:
    assert main(["bench", "--smoke", "--batch", "1,2", "--out", str(tmp_path)]) == 0
    records = [json.loads(line) for line in (tmp_path / "batch.jsonl").read_text().splitlines()]
    # 2 smoke prompts: two batches of 1, one of 2; every method on each
    assert len(records) == 3 * len(DEFAULT_BATCH_METHODS)
    assert {r["method"] for r in records} == set(DEFAULT_BATCH_METHODS)
    assert all(r["same_as_reference"] for r in records if r["method"] != "hf-target")
    assert {r["reference"] for r in records if r["method"] != "hf-target"} == {"hf-target"}
    assert all(r["run"]["machine"]["cpu_model"] for r in records)  # the CPU is named
    table = (tmp_path / "batch.md").read_text()
    assert "| adaptive |" in table and "| static-hybrid |" in table and "batch 2 tok/s" in table
    assert table.strip() in capsys.readouterr().out


def test_new_tokens_count_up_to_each_rows_eos() -> None:
    assert new_token_count(torch.tensor([[5, 2, 0, 0], [5, 6, 7, 8]]), eos=[2]) == 2 + 4


@pytest.mark.parametrize("text", ["", "0,2", "a", "2,-1"])
def test_bad_batch_sizes(text: str) -> None:
    with pytest.raises(ConfigError, match="--batch"):
        parse_batch_sizes(text)


def test_unknown_batch_method() -> None:
    with pytest.raises(ConfigError, match="choose from"):
        parse_batch_methods("adaptive,fastest")


def test_the_integer_targets_methods_are_asked_for_by_name() -> None:
    """w8a8/w4a8 need AVX512-VNNI and compute outputs of their own: not in the default set,
    accepted by name."""
    assert not any(m.startswith(("w8a8", "w4a8")) for m in DEFAULT_BATCH_METHODS)
    assert parse_batch_methods("w8a8-target,w4a8-hybrid") == ("w8a8-target", "w4a8-hybrid")
    # a bf16 target with the 4-bit draft: the target's own output, but the draft's kernel
    # needs AVX512-VNNI too, so it is asked for by name as well
    assert "fast-hybrid-w4a8" not in DEFAULT_BATCH_METHODS
    assert parse_batch_methods("fast-hybrid-w4a8") == ("fast-hybrid-w4a8",)
