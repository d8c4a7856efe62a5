"""Vocabulary identity: a pair is checked by its token list, not only by its size.

A draft whose vocabulary has the target's size but other tokens (two GGUFs of different
families, two tokenizers) would run, and nearly every drafted token would be rejected. A
`Vocabulary` is the token list's size and a sha256 of its (id, token) entries: cheap to
compare, and for a GGUF read from the file's header alone (`tokenizer.ggml.tokens`), before
any conversion.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from dynaspec.errors import DynaspecError, IncompatibleModelsError
from dynaspec.models import cache as model_cache
from dynaspec.models.presets import ModelPreset, find_model_preset

GGUF_TOKENS_KEY = "tokenizer.ggml.tokens"
_MAGIC = b"GGUF"
# Bytes of each fixed-size GGUF value type (8 is a string, 9 an array).
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
_MAX_STRING = 1 << 24  # longer than any key or token: the file is not what it claims
_SKIP_BLOCK = 1 << 20


@dataclass(frozen=True)
class Vocabulary:
    """A token list by its size and a sha256 of its (id, token) entries."""

    size: int
    fingerprint: str


def vocabulary_of(entries: Iterable[tuple[int, str]]) -> Vocabulary:
    """The Vocabulary of (id, token) entries, in any order."""
    digest = hashlib.sha256()
    size = 0
    for token_id, token in sorted(entries):
        data = token.encode("utf-8", "surrogatepass")
        digest.update(struct.pack("<qq", token_id, len(data)) + data)
        size += 1
    return Vocabulary(size, digest.hexdigest())


def tokenizer_vocabulary(tokenizer: Any) -> Vocabulary:
    """The Vocabulary of a transformers tokenizer (its get_vocab(), added tokens included)."""
    return vocabulary_of((int(i), str(token)) for token, i in tokenizer.get_vocab().items())


class _EndOfHeader(Exception):
    """The header ended early or is not a GGUF header dynaspec reads."""


class _Chain:
    """Sequential reads over files that, concatenated, form one GGUF (a preset's slices)."""

    def __init__(self, handles: Sequence[IO[bytes]]) -> None:
        self.handles = list(handles)

    def read(self, count: int) -> bytes:
        parts: list[bytes] = []
        while count > 0 and self.handles:
            part = self.handles[0].read(count)
            if not part:
                self.handles.pop(0)
                continue
            parts.append(part)
            count -= len(part)
        if count > 0:
            raise _EndOfHeader
        return b"".join(parts)

    def skip(self, count: int) -> None:
        """Skip `count` bytes, in blocks (a damaged header may claim any count)."""
        while count > 0:
            count -= len(self.read(min(count, _SKIP_BLOCK)))


def _unpack(chain: _Chain, fmt: str) -> int:
    return int(struct.unpack(fmt, chain.read(struct.calcsize(fmt)))[0])


def _string(chain: _Chain, order: str) -> bytes:
    length = _unpack(chain, order + "Q")
    if length > _MAX_STRING:
        raise _EndOfHeader
    return chain.read(length)


def _skip_value(chain: _Chain, kind: int, order: str) -> None:
    if kind in _SCALAR_BYTES:
        chain.skip(_SCALAR_BYTES[kind])
    elif kind == _STRING:
        _string(chain, order)
    elif kind == _ARRAY:
        item_kind, count = _unpack(chain, order + "I"), _unpack(chain, order + "Q")
        if item_kind in _SCALAR_BYTES:
            chain.skip(_SCALAR_BYTES[item_kind] * count)
        else:
            for _ in range(count):
                _skip_value(chain, item_kind, order)
    else:
        raise _EndOfHeader


def _strings(chain: _Chain, order: str) -> Iterator[tuple[int, str]]:
    if _unpack(chain, order + "I") != _STRING:
        raise _EndOfHeader
    for index in range(_unpack(chain, order + "Q")):
        yield index, _string(chain, order).decode("utf-8", "surrogateescape")


def _header_vocabulary(chain: _Chain) -> Vocabulary | None:
    if chain.read(4) != _MAGIC:
        raise _EndOfHeader
    version = _unpack(chain, "<I")
    order = "<" if version in (2, 3) else ">"  # a big-endian GGUF's version reads swapped
    if order == ">" and struct.unpack(">I", struct.pack("<I", version))[0] not in (2, 3):
        raise _EndOfHeader  # version 1 (32-bit counts) or unknown
    _unpack(chain, order + "Q")  # tensor count
    for _ in range(_unpack(chain, order + "Q")):
        key = _string(chain, order)
        kind = _unpack(chain, order + "I")
        if key == GGUF_TOKENS_KEY.encode() and kind == _ARRAY:
            return vocabulary_of(_strings(chain, order))
        _skip_value(chain, kind, order)
    return None


def gguf_vocabulary(paths: Sequence[Path]) -> Vocabulary | None:
    """The token list of the GGUF formed by `paths` concatenated (one file, or a preset's
    slices), read from its header only; None where the header has none or cannot be read
    (the loader then reports the file itself)."""
    try:
        with ExitStack() as stack:
            handles = [stack.enter_context(Path(path).open("rb")) for path in paths]
            return _header_vocabulary(_Chain(handles))
    except (OSError, _EndOfHeader, struct.error, UnicodeError):
        return None


@dataclass(frozen=True)
class GgufSource:
    """The files that form a model's GGUF, and whether its cache folder is built yet."""

    paths: tuple[Path, ...]
    converted: bool


def gguf_source(
    model: str | os.PathLike[str] | ModelPreset,
    dtype: torch.dtype,
    cache_dir: str | os.PathLike[str] | None = None,
) -> GgufSource | None:
    """Where the GGUF of a preset (or its name) or a .gguf path lies; None for anything else
    (a folder, a hub id) and for a preset whose packages are missing (its load says so)."""
    if isinstance(model, ModelPreset):
        preset: ModelPreset | None = model
    else:
        preset = find_model_preset(model) if isinstance(model, str) else None
    if preset is not None:
        folder = model_cache.preset_folder(preset, dtype, cache_dir)
        try:
            paths = model_cache.locate_slices(preset)
        except DynaspecError:
            return None
        return GgufSource(paths, model_cache.is_complete_folder(folder))
    path = Path(os.fspath(model)).expanduser()
    if not path.is_file():
        return None
    folder = model_cache.file_folder(path, dtype, cache_dir)
    return GgufSource((path,), model_cache.is_complete_folder(folder))


def check_gguf_pair(
    target: GgufSource | None, draft: GgufSource | None, *, target_name: str, draft_name: str
) -> None:
    """Before converting either of two GGUFs: raise IncompatibleModelsError unless their
    headers hold the same token list. Once both are converted the loaded tokenizers are
    compared instead (cheaper than reading the headers again)."""
    if target is None or draft is None or (target.converted and draft.converted):
        return
    target_vocabulary = gguf_vocabulary(target.paths)
    draft_vocabulary = gguf_vocabulary(draft.paths)
    if target_vocabulary is not None and draft_vocabulary is not None:
        check_same_vocabulary(
            target_vocabulary, draft_vocabulary, target_name=target_name, draft_name=draft_name
        )


def check_same_vocabulary(
    target: Vocabulary,
    draft: Vocabulary,
    *,
    target_name: str | None = None,
    draft_name: str | None = None,
) -> None:
    """Raise IncompatibleModelsError naming both models unless their token lists are equal."""
    if target == draft:
        return
    sizes = (
        f"both {target.size} tokens, but not the same token for every id"
        if target.size == draft.size
        else f"{draft.size} and {target.size} tokens"
    )
    the_draft = "the draft" if draft_name is None else f"the draft {draft_name!r}"
    the_target = "the target" if target_name is None else f"the target {target_name!r}"
    problem = (
        f"{the_draft} and {the_target} differ in their vocabulary ({sizes}): the target "
        "would reject nearly every drafted token"
    )
    raise IncompatibleModelsError(
        f"{problem}; pick a draft from the same model family, trained with the target's "
        "tokenizer (e.g. a pair preset: load_pair()), or pass draft=None to decode with the "
        "target alone",
        cli_message=f"{problem}; give a --draft from the same model family, trained with the "
        "target's tokenizer (`dynaspec models` lists the pairs), or --no-draft",
    )
