"""Give back the memory of weights read from a mapped model file once their copies exist.

transformers maps a model's safetensors files into memory (private, read-write mappings), so
converting a layer reads its weight's pages into the process, and they stay resident (counted
in `RssFile`) as long as anything else maps the same file: a 400 MB shard holds several layers,
and the tied embedding keeps the last shard's mapping alive for the life of the adapter. A
1.5B + 0.5B int8 pair then held 3.4 GB of file pages beside 2.5 GB of its own codes, and the
process peaked at 6.8 GB.

`drop_pages(tensor, mappings)` tells the kernel (`madvise(MADV_DONTNEED)`) that the whole
pages inside a tensor are not needed: a clean page of a file mapping is dropped from the
process and read from the file again if anything touches it later (the embedding's rows, a
few at a time). Only pages of file mappings that hold no anonymous page are dropped (a
page of a private mapping that the process wrote to becomes an anonymous copy, which
dropping would lose); anything else (anonymous memory, other systems than Linux) is left as
it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
from dataclasses import dataclass

import torch

MADV_DONTNEED = 4  # Linux


@dataclass(frozen=True)
class FileMapping:
    """One mapping of a file into the process: [start, end) in its address space."""

    start: int
    end: int
    path: str


def clean_file_mappings(smaps: str = "/proc/self/smaps") -> tuple[FileMapping, ...]:
    """Mappings of regular files that hold no page written by the process (`Anonymous: 0
    kB`: a written page of a private mapping is an anonymous copy; a page the file itself
    has not yet saved counts as dirty but is the file's); empty where /proc is not there."""
    if not sys.platform.startswith("linux"):
        return ()
    try:
        with open(smaps) as handle:
            text = handle.read()
    except OSError:
        return ()
    mappings, current, written = [], None, 0
    for line in text.splitlines():
        head = line.split(maxsplit=5)
        if head and "-" in head[0] and ":" not in head[0]:
            if current is not None and written == 0:
                mappings.append(current)
            current, written = _file_mapping(head), 0
        elif line.startswith("Anonymous:"):
            written = int(line.split()[1])
    if current is not None and written == 0:
        mappings.append(current)
    return tuple(mappings)


def _file_mapping(head: list[str]) -> FileMapping | None:
    """A mapping of a regular file from its smaps header (None: anonymous, a device, ...)."""
    if len(head) < 6 or head[4] == "0" or not head[5].startswith("/"):
        return None
    start, end = (int(value, 16) for value in head[0].split("-"))
    return FileMapping(start, end, head[5])


def drop_pages(tensor: torch.Tensor, mappings: tuple[FileMapping, ...]) -> int:
    """Give back the whole pages of `tensor`'s bytes when they lie in one of `mappings` (clean
    file mappings); the bytes given back (0 when none)."""
    if tensor.device.type != "cpu" or not mappings or not tensor.is_contiguous():
        return 0
    start = tensor.data_ptr()
    end = start + tensor.numel() * tensor.element_size()
    if not any(m.start <= start and end <= m.end for m in mappings):
        return 0
    page = os.sysconf("SC_PAGE_SIZE")
    first, last = -(-start // page) * page, end // page * page
    if last <= first or _libc().madvise(first, last - first, MADV_DONTNEED) != 0:
        return 0
    return last - first


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.madvise.restype = ctypes.c_int
    return libc


def trim_heap() -> None:
    """Hand the C heap's free memory back to the system (glibc's `malloc_trim`): a layer's
    conversion frees tens of megabytes of temporaries that glibc would otherwise keep (about
    1 GB over the 1.5B model's layers). Nothing elsewhere than Linux with glibc."""
    if not sys.platform.startswith("linux"):
        return
    trim = getattr(_libc(), "malloc_trim", None)  # None where the C library is not glibc
    if trim is not None:
        trim(0)
