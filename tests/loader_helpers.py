"""Loaders replaced by a recorder, and a faked CUDA GPU: for tests of what the CLI and the
loaders pass on before any model loads (test_cli_device.py, test_graphs_options.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from dynaspec.errors import ModelNotAvailableError
from dynaspec.eval.bench import run as bench_run
from dynaspec.models import loading

STOP = "stopped by the test before loading"


class LoadRecorder:
    """Stands in for a loader: records its keywords (its positional arguments under "args")
    and stops the command (exit 1)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: object, **kwargs: Any) -> None:
        self.calls.append({"args": args, **kwargs})
        raise ModelNotAvailableError(STOP)


def record_loaders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *also: str) -> LoadRecorder:
    """load_pair, bench's load_models and the loading functions named in `also` replaced by
    one recorder; the model cache in `tmp_path`."""
    record = LoadRecorder()
    for name in ("load_pair", *also):
        monkeypatch.setattr(loading, name, record)
    monkeypatch.setattr(bench_run, "load_models", record)
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path / "cache"))
    return record


def fake_one_cuda_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine has one CUDA GPU, as far as the checks before loading can tell."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
