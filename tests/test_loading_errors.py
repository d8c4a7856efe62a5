"""Bad model files and folders in Python: one typed error with the fix in Python's words
(parameter names), the command line's wording kept apart (`for_cli()`). Cached loads are
quiet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_loading import write_tiny_gguf
from transformers.utils import logging as hf_logging

from dynaspec.errors import CacheNotWritableError, ConfigError, CorruptModelFileError
from dynaspec.models import loading
from dynaspec.models.dtype import machine_dtype

pytestmark = pytest.mark.usefixtures("keep_thread_count")


def test_wrong_field_type_in_config_json(tiny_folder: Path, tmp_path: Path) -> None:
    config = json.loads((tiny_folder / "config.json").read_text())
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (tmp_path / name).write_bytes((tiny_folder / name).read_bytes())
    (tmp_path / "config.json").write_text(json.dumps({**config, "hidden_size": [64]}))
    with pytest.raises(CorruptModelFileError, match="hidden_size.*check its config.json"):
        loading.load_model(tmp_path)


def test_truncated_gguf(tmp_path: Path) -> None:
    whole = write_tiny_gguf(tmp_path / "whole.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) - 100])
    with pytest.raises(CorruptModelFileError, match="cut short or damaged.*download it again"):
        loading.load_model(cut, cache_dir=tmp_path / "cache")


def test_file_that_is_not_a_gguf(tmp_path: Path) -> None:
    path = tmp_path / "archive.gguf"
    path.write_bytes(b"PK\x03\x04" + bytes(100))
    with pytest.raises(CorruptModelFileError, match="does not start with the GGUF magic"):
        loading.load_model(path, cache_dir=tmp_path / "cache")


def test_unwritable_cache_folder(tmp_path: Path) -> None:
    gguf_path = tmp_path / "model.gguf"
    write_tiny_gguf(gguf_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(CacheNotWritableError, match="pass cache_dir= a writable folder") as info:
        loading.load_model(gguf_path, cache_dir=blocker / "cache")
    assert isinstance(info.value, OSError)
    assert "DYNASPEC_CACHE to a writable folder" in info.value.for_cli()


def test_unknown_pair_points_to_the_tiny_pair() -> None:
    with pytest.raises(ConfigError, match=r"tiny_pair\(\)") as info:
        loading.load_pair("nonsense")
    assert "--target and --draft" in info.value.for_cli()


def test_default_dtype_is_the_machines(tmp_path: Path) -> None:
    gguf_path = tmp_path / "model.gguf"
    write_tiny_gguf(gguf_path)
    model, _ = loading.load_model(gguf_path, cache_dir=tmp_path / "cache")
    assert next(model.parameters()).dtype is machine_dtype().dtype


def test_a_cached_load_shows_no_progress_bar(tiny_folder: Path, capfd) -> None:
    before = hf_logging.is_progress_bar_enabled()
    try:
        for enabled in (True, False):  # restored to what it was, either way
            (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
            loading.load_model(tiny_folder, dtype="float32")
            assert hf_logging.is_progress_bar_enabled() is enabled
    finally:
        (hf_logging.enable_progress_bar if before else hf_logging.disable_progress_bar)()
    assert "Loading weights" not in capfd.readouterr().err
