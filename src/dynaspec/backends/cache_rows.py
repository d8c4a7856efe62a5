"""Rows in and out of a transformers `DynamicCache`, for a batch whose rows change between
rounds (continuous batching: a request joins, a request ends).

A batch's cache holds every row at the same width; a row's own entries sit at the columns its
`slots` name and the 2-D attention mask hides every other column of that row (a hole). These
functions move whole rows and columns and leave the bookkeeping of slots and mask to the
caller (backends/hf_batch.py). Keys already carry their rotary positions, so a column can move
without changing what it means: only the mask says which columns a row attends to.

Only caches made of plain `DynamicLayer`s (full attention) can be rearranged this way;
anything else (sliding windows, recurrent state, quantized or offloaded layers) is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from dynaspec.errors import UnsupportedModelError


def _layers(cache: Any) -> Iterator[Any]:
    """The cache's layers, each checked to be a plain full-attention DynamicLayer."""
    for layer in getattr(cache, "layers", None) or ():
        if type(layer) is not DynamicLayer:
            raise UnsupportedModelError(
                f"a {type(layer).__name__} cache layer cannot take rows that join or leave a "
                "running batch (only full-attention DynamicLayer caches can): serve this model "
                "with --max-batch 1, or generate() one prompt at a time"
            )
        # A layer holds rows once it is 4-D, even with no columns left (a rollback to
        # nothing cached): those rows must still join and leave with the batch. Only the
        # 1-D placeholder of a layer never fed holds none.
        if layer.is_initialized and layer.keys is not None and layer.keys.dim() == 4:
            yield layer
    if not hasattr(cache, "layers"):
        raise UnsupportedModelError(
            f"a {type(cache).__name__} has no per-layer key/value tensors that rows can join "
            "or leave: generate() one prompt at a time"
        )


def select_rows(cache: Any, keep: torch.Tensor) -> None:
    """Keeps only the rows `keep` (k,) of the batch, in that order."""
    for layer in _layers(cache):
        layer.keys = layer.keys.index_select(0, keep.to(layer.keys.device))
        layer.values = layer.values.index_select(0, keep.to(layer.values.device))


def gather_columns(cache: Any, index: torch.Tensor) -> None:
    """Column j of row r becomes the old column index[r, j]; index: (B, W') int64."""
    for layer in _layers(cache):
        batch, heads, _, dim = layer.keys.shape
        where = index.to(layer.keys.device)[:, None, :, None].expand(batch, heads, -1, dim)
        layer.keys = layer.keys.gather(2, where)
        layer.values = layer.values.gather(2, where)


def append_row(cache: Any, row: Any, width: int) -> None:
    """Appends the one-row cache `row` (its C_r columns) to `cache` (B rows, C columns),
    both right-aligned to `width` >= max(C, C_r) columns by zero columns on the left (holes
    the caller masks)."""
    ours, theirs = list(_layers(cache)), list(_layers(row))
    if len(ours) != len(theirs):
        raise UnsupportedModelError(
            "the new row's cache has a different number of layers than the batch's; "
            "generate() one prompt at a time"
        )
    for layer, extra in zip(ours, theirs, strict=True):
        layer.keys = torch.cat([_left_pad(layer.keys, width), _left_pad(extra.keys, width)])
        layer.values = torch.cat([_left_pad(layer.values, width), _left_pad(extra.values, width)])


def _left_pad(states: torch.Tensor, width: int) -> torch.Tensor:
    """(B, H, C, D) -> (B, H, width, D) with zeros before the C columns."""
    missing = width - states.shape[2]
    if missing <= 0:
        return states
    zeros = states.new_zeros(states.shape[0], states.shape[1], missing, states.shape[3])
    return torch.cat([zeros, states], dim=2)


def add_zero_rows(cache: Any, before: int, after: int) -> None:
    """Adds `before` rows of zeros before the batch's rows and `after` after them (rows
    whose every column is a hole)."""
    for layer in _layers(cache):
        layer.keys = _zero_rows(layer.keys, before, after)
        layer.values = _zero_rows(layer.values, before, after)


def _zero_rows(states: torch.Tensor, before: int, after: int) -> torch.Tensor:
    shape = states.shape[1:]
    return torch.cat([states.new_zeros(before, *shape), states, states.new_zeros(after, *shape)])
