"""`dynaspec generate`'s default draft quantization (`models.arguments.auto_draft_quantize`):
the preset pair's draft in 4 bits on a CPU that runs bf16 and builds the w4a8 kernel, and
nowhere else."""

from __future__ import annotations

import argparse

import pytest
import torch

from dynaspec.backends.kernels.w4a8 import KERNEL as w4a8_kernel
from dynaspec.backends.kernels.w8a8 import KERNEL as w8a8_kernel
from dynaspec.models import loading
from dynaspec.models.arguments import auto_draft_quantize
from dynaspec.models.dtype import DtypeChoice


def _args(**given: object) -> argparse.Namespace:
    flags = {
        "pair": None, "target": None, "draft": None, "dtype": None, "static": False,
        "compile": False, "quantize": None, "draft_quantize": None, "draft_engine": "torch",
        "no_draft": False,
    }  # fmt: skip
    flags.update(given)
    return argparse.Namespace(**flags)


@pytest.fixture
def capable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU that runs bf16 and builds both integer kernels."""
    monkeypatch.setattr(loading, "dtype_choice", lambda *_, **__: DtypeChoice(torch.bfloat16, ""))
    monkeypatch.setattr(w4a8_kernel, "available", lambda: True)
    monkeypatch.setattr(w8a8_kernel, "available", lambda: True)


def test_the_preset_pairs_draft_runs_in_4_bits_by_default(capable: None) -> None:
    args = _args()
    assert auto_draft_quantize(args) and args.draft_quantize == "w4a8"
    args = _args(pair="qwen2.5-coder")
    assert auto_draft_quantize(args) and args.draft_quantize == "w4a8"


@pytest.mark.parametrize(
    "given",
    [
        {"draft_quantize": "none"},  # asked for the draft as loaded
        {"draft_quantize": "int8"},
        {"static": True},
        {"compile": True},
        {"quantize": "int8"},
        {"draft_engine": "llamacpp"},
        {"no_draft": True},
        {"pair": "tiny"},
        {"target": "some/folder", "draft": "other/folder"},
    ],
)
def test_any_choice_of_the_caller_stands(capable: None, given: dict) -> None:
    args = _args(**given)
    before = args.draft_quantize
    assert not auto_draft_quantize(args)
    assert args.draft_quantize == before


def test_not_on_a_cpu_without_the_kernel_or_bf16(
    capable: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(w4a8_kernel, "available", lambda: False)
    assert not auto_draft_quantize(_args())
    monkeypatch.setattr(w4a8_kernel, "available", lambda: True)
    monkeypatch.setattr(loading, "dtype_choice", lambda *_, **__: DtypeChoice(torch.float32, ""))
    args = _args()
    assert not auto_draft_quantize(args) and args.draft_quantize is None
