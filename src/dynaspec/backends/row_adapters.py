"""The batch form of any single-sequence adapter: one `ModelAdapter` per row, each with its
own cache.

This is how a backend written once reaches batches and the server: `RowAdapters` satisfies
`core.protocols.BatchModelAdapter` by running each row's tokens through that row's own
adapter, one forward per row that is fed, and `rows_of` makes it from any adapter that can
`fork()` (a second adapter over the same weights with a cache of its own). Nothing is shared
but the weights, so a row's logits are exactly those it would get alone, and every cache the
single path handles works in a batch and in the server: a sliding window (backends/windows.py
records what a rollback past the window needs, per row), a llama.cpp draft, any new backend.
The price is the forwards: a round costs one forward per row, not one for all; the
coordinators backends/hf_batch.py and static_batch.py share them where the cache allows.

A row's left padding (a fixed batch's) is never fed: it counts as cached from the start,
so `num_cached` keeps the batch protocol's meaning (sequence tokens, padding included).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from dynaspec.core.protocols import ModelAdapter
from dynaspec.errors import UnsupportedModelError, UnsupportedOptionError


class RowAdapters:
    """`core.protocols.BatchModelAdapter` over one `ModelAdapter` per row, made by `make`;
    `like`: an adapter of the kind `make` makes, read for the sizes (None: `make` one)."""

    packs_rows = True  # a round costs what its rows' tokens cost, row by row

    def __init__(
        self,
        make: Callable[[], ModelAdapter],
        bytes_per_token: int = 0,
        like: ModelAdapter | None = None,
    ) -> None:
        self.make = make
        first = make() if like is None else like
        if first.is_encoder_decoder:
            raise UnsupportedModelError(
                f"{type(first).__name__} wraps an encoder-decoder model: a batch commits each "
                "row's prompt as its first tokens, which an encoder-decoder model does not "
                "decode; call generate() once per prompt (input_ids of shape (1, T))"
            )
        self.vocab_size = first.vocab_size
        self.max_length = first.max_length
        self.device = getattr(first, "device", None) or torch.device("cpu")
        self._spare: ModelAdapter | None = first if like is None else None  # the next row's
        self._bytes_per_token = bytes_per_token
        self.rows: list[ModelAdapter] = []
        self.num_pads: list[int] = []

    def __repr__(self) -> str:
        return f"RowAdapters({len(self.rows)} rows)"

    def _adapter(self) -> ModelAdapter:
        made, self._spare = self._spare, None
        return made if made is not None else self.make()

    @property
    def num_cached(self) -> list[int]:
        """Per row: tokens of its sequence (left padding included) cached."""
        return [pads + row.num_cached for row, pads in zip(self.rows, self.num_pads, strict=True)]

    def bytes_per_token(self) -> int:
        return self._bytes_per_token

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Start the rows of a (B, T) left-padded prompt; nothing is fed yet."""
        self.rows, self.num_pads = [], []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            pads = int((mask == 0).sum())
            adapter = self._adapter()
            adapter.begin(ids[None, pads:])
            self.rows.append(adapter)
            self.num_pads.append(pads)

    def forward(
        self, new_tokens: Sequence[torch.Tensor], num_logits: Sequence[int]
    ) -> list[torch.Tensor]:
        """Each row's own forward over its new tokens (a row fed none runs nothing)."""
        out = []
        for row, tokens, wanted in zip(self.rows, new_tokens, num_logits, strict=True):
            if tokens.numel():
                logits = row.forward(tokens, max(int(wanted), 1))  # (wanted, V)
                out.append(logits[logits.shape[0] - int(wanted) :])
            else:
                out.append(torch.empty(0, self.vocab_size, device=self.device))
        return out

    def crop(self, num_tokens: Sequence[int]) -> None:
        for row, pads, keep in zip(self.rows, self.num_pads, num_tokens, strict=True):
            row.crop(max(int(keep) - pads, 0))

    def prefill(self, tokens: torch.Tensor, own: ModelAdapter | None = None) -> ModelAdapter:
        """A joining row's own adapter with `tokens` (n,) fed after what `own` holds."""
        if own is None:
            own = self._adapter()
            own.begin(tokens[None, :0])
        if tokens.numel():
            own.forward(tokens, 1)
        return own

    def join(self, prompt: torch.Tensor, own: ModelAdapter | None = None) -> None:
        """Adds a row whose sequence starts with `prompt` (n,): its first n - 1 tokens cached
        (by `prefill`: `own`, or here), the last fed with its first round."""
        done = 0 if own is None else own.num_cached
        own = self.prefill(prompt[done:-1], own)
        self.rows.append(own)
        self.num_pads.append(0)

    def leave(self, keep: Sequence[int]) -> None:
        self.rows = [self.rows[row] for row in keep]
        self.num_pads = [self.num_pads[row] for row in keep]


def rows_of(adapter: ModelAdapter) -> RowAdapters:
    """The batch form of `adapter`: a fork of it per row (its own cache), the caller's
    adapter itself never fed; UnsupportedOptionError, naming `fork()`, where it has none."""
    size = getattr(adapter, "bytes_per_token", None)
    return RowAdapters(forker(adapter), size() if callable(size) else 0, like=adapter)


def forker(adapter: ModelAdapter) -> Callable[[], ModelAdapter]:
    """`adapter.fork`: what makes a second adapter over its weights with a cache of its own."""
    fork = getattr(adapter, "fork", None)
    if not callable(fork):
        raise UnsupportedOptionError(
            f"a {type(adapter).__name__} decodes one sequence and has no fork() to make one "
            "per row: give it a fork() (a second adapter over the same weights with a cache "
            "of its own) to run it in batches and the server, or call generate() once per "
            "prompt (input_ids of shape (1, T))"
        )
    return fork


def own_adapter(model: Any) -> ModelAdapter:
    """An adapter over `model` with a cache of its own: a new transformers adapter, or a
    fork of an adapter (a static adapter's weights shared, its cache not)."""
    from dynaspec.backends.hf import as_adapter

    adapter = as_adapter(model)
    return forker(adapter)() if adapter is model else adapter
