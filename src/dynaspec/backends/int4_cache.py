"""int4 layers kept on disk, so that a model quantized once loads without the grid search.

`int4_codes.quantize` fits each group's scale and offset by a grid search and least-squares
refits, and the layer is then measured (its relative error decides int4 or int8) and packed
into its kernel's layout: about a minute and a half for Qwen2.5-Coder 1.5B on the 2-core
AVX512-BF16 EPYC, at every load. `packed_layer(weight, group, kernel)` returns the same
packed codes and error, and keeps them under `$DYNASPEC_CACHE/int4/` (one safetensors file
a layer, named by a hash of the weight's bytes, shape, dtype, group, the kernel and
`VERSION`; 0.625 bytes a weight), so that the next load of the same weights reads them back:
a hash and a read instead of the search.

Layers under `MIN_WEIGHTS` are built every time (fast, and tests' tiny models leave no
files); `DYNASPEC_INT4_CACHE=0` turns the cache off. A file that cannot be read is built
again and rewritten; a cache that cannot be written is skipped.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import torch

from dynaspec.backends.kernels import int4_codes
from dynaspec.backends.kernels.base import PackedKernel
from dynaspec.paths import default_cache_dir

VERSION = 1  # bump when int4_codes.quantize or a kernel's layout changes
MIN_WEIGHTS = 1 << 20  # smaller layers are not cached
SWITCH = "DYNASPEC_INT4_CACHE"


def packed_layer(
    weight: torch.Tensor, group: int, kernel: PackedKernel
) -> tuple[torch.Tensor, float]:
    """(kernel.packed(codes), error) of `int4_codes.quantize(weight, group)`'s codes, the
    error relative (`int4_codes.relative_error`); from the cache when it holds them."""
    if weight.numel() < MIN_WEIGHTS or os.environ.get(SWITCH) == "0":
        return _build(weight, group, kernel)
    path = folder() / f"{weight_key(weight, group, kernel.SPEC.name)}.safetensors"
    found = _read(path)
    if found is not None:
        return found
    packed, error = _build(weight, group, kernel)
    _write(path, packed, error)
    return packed, error


def _build(weight: torch.Tensor, group: int, kernel: PackedKernel) -> tuple[torch.Tensor, float]:
    codes = int4_codes.quantize(weight, group)
    return kernel.packed(*codes), int4_codes.relative_error(codes, weight)


def folder() -> Path:
    return default_cache_dir() / "int4"


def weight_key(weight: torch.Tensor, group: int, kernel: str) -> str:
    """A hash of the weight's bytes and of everything else its packed codes depend on."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"v{VERSION} {kernel} {tuple(weight.shape)} {weight.dtype} {group}".encode())
    data = weight.detach().contiguous().view(torch.uint8)
    for first in range(0, data.shape[0], 4096):  # a few MB at a time
        digest.update(memoryview(data[first : first + 4096].numpy()))
    return digest.hexdigest()


def _read(path: Path) -> tuple[torch.Tensor, float] | None:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        return None
    try:
        tensors = load_file(path)
        # A copy in torch's own memory: the kernels read the codes with aligned 64-byte
        # loads, and a tensor read from the file is only as aligned as its offset there.
        return tensors["packed"].clone(), float(tensors["error"])
    except (OSError, KeyError, ValueError, RuntimeError, SafetensorError):
        return None


def _write(path: Path, packed: torch.Tensor, error: float) -> None:
    from safetensors.torch import save_file

    tensors = {"packed": packed.contiguous(), "error": torch.tensor(error, dtype=torch.float64)}
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".partial")
        os.close(handle)
        save_file(tensors, temporary)
        os.replace(temporary, path)
    except OSError:  # a read-only or full disk: the codes are used uncached
        _remove(temporary)
    except BaseException:  # an interrupt: no half-written file left behind
        _remove(temporary)
        raise


def _remove(temporary: str | None) -> None:
    if temporary is not None:
        Path(temporary).unlink(missing_ok=True)
