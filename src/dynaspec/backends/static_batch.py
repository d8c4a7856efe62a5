"""The fast path over a batch: a static KV cache with a row per sequence and per-row positions.

`StaticBatchAdapter` runs a `StaticAdapter`'s decoder (its prepacked or quantized weights,
uncompiled) over caches of shape (B, kv_heads, L, d) per layer. Row r holds its sequence's
real tokens from slot 0 on (its left padding is never written: the first real token has
position 0, transformers' left-padding convention), and a count per row says how many of its
sequence's tokens (left padding included) are cached. Rolling a row back moves its count.

A ragged forward feeds every row its own number of tokens: the block is left-aligned, row r's
n_r tokens at its next slots, the columns past them filled. The linear layers (most of a
forward's cost) run over the N = sum of n_r tokens alone, packed (`decoder.Packing`), so a
forward costs about what N tokens cost, not B times the widest row's; attention runs over the
block, where the filled cells hold zeros. Those cells' keys and values are written to the
slots right after the row's real tokens, where nothing attends to them (a token at slot p
attends to slots <= p) and the row's next forward overwrites them, as the single adapter's
bucket padding does (backends/static.py). A row fed nothing this forward gets only such
cells. Rows join (a prompt prefilled in a cache of its own, `prefill`,
then copied in as a new row) and leave (their rows dropped) between rounds.

Memory: 2 x layers x kv_heads x head_dim x bytes per cached token and row, for the longest row
(`bytes_per_token`); the cache grows by `CAPACITY_STEP` slots when a row needs more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any

import torch

from dynaspec.backends.batch_graphs import batch_graphs
from dynaspec.backends.decoder import PREFILL_BLOCK, Packing, Prefill
from dynaspec.backends.hf import HFAdapter, as_adapter
from dynaspec.backends.hf_batch import HFBatchAdapter, cache_bytes_per_token
from dynaspec.backends.row_adapters import RowAdapters, rows_of
from dynaspec.backends.static import (
    ATTEND_STEP,
    CAPACITY_STEP,
    StaticAdapter,
    causal_mask,
    round_up,
)
from dynaspec.backends.windows import sliding_window
from dynaspec.errors import UnsupportedOptionError


@dataclass
class RowCache:
    """A joining row's own cache (one row) while its prompt is prefilled."""

    tensors: list[torch.Tensor]  # per layer key and value, (1, kv_heads, L, d)
    length: int  # slots filled


class StaticBatchAdapter:
    """`core.protocols.BatchModelAdapter` over a `StaticAdapter`'s weights."""

    def __init__(self, fast: StaticAdapter) -> None:
        if fast.fast.compile:
            raise UnsupportedOptionError(
                "a compiled model (compile=True) decodes one sequence: batches run the fast "
                "path uncompiled; load it with static=True (and quantize=) but without "
                "compile=True, or call generate() once per prompt",
                cli_message="--compile decodes one prompt at a time: drop it for batches "
                "(--static and --quantize run in batches)",
            )
        self.fast = fast
        self.decoder = fast.decoder
        self.vocab_size = fast.vocab_size
        self.max_length = fast.max_length
        self.device = fast.device
        self.packs_rows = True  # a forward costs what its tokens cost, not B x the widest
        self.verify_buckets: tuple[int, ...] = ()  # widths forwards are padded to (graphs)
        # bf16 on the row-invariant kernels: each row attends as it would alone (Prefill)
        self.bit_exact = fast.bit_exact
        # a chunked prefill's chunks (but the last) are whole blocks of this (ContinuousBatch)
        self.prefill_block = PREFILL_BLOCK if self.bit_exact else 1
        self.cache: list[torch.Tensor] = []  # per layer key and value, (B, kv_heads, L, d)
        self.capacity = 0
        self.lengths: list[int] = []  # per row: sequence tokens cached (left padding included)
        self.num_pads: list[int] = []  # per row: left padding at the start of its sequence
        self.prompt_ends: list[int] = []  # per row: slots of its prompt but the last token
        self._cos = self._sin = torch.empty(0)
        self._graphs = batch_graphs(fast, self)  # CUDA graphs per bucket (batch_graphs.py)
        if self._graphs is not None:  # a block of buckets costs the widest row's, padded
            self.packs_rows, self.verify_buckets = False, self._graphs.buckets
            self.cache, self.capacity, self._cos, self._sin = self._graphs.kept

    def __repr__(self) -> str:
        return f"StaticBatchAdapter({self.fast!r})"

    @property
    def num_cached(self) -> list[int]:
        """Per row: how many tokens of its sequence (left padding included) are cached."""
        return list(self.lengths)

    def bytes_per_token(self) -> int:
        """Cache bytes one cached token of one row takes (keys and values, every layer)."""
        decoder = self.decoder
        element = torch.empty(0, dtype=decoder.dtype).element_size()
        return 2 * len(decoder.blocks) * decoder.num_kv_heads * decoder.head_dim * element

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Start the rows of a (B, T) left-padded prompt; nothing is fed yet."""
        rows = input_ids.shape[0]
        self.num_pads = [int((row == 0).sum()) for row in attention_mask]
        self.prompt_ends = [input_ids.shape[1] - pads - 1 for pads in self.num_pads]
        self.lengths = [0] * rows
        longest = max(input_ids.shape[1] - pads for pads in self.num_pads)
        self.cache, self.capacity = [], 0
        if self._graphs is not None:  # the cache the graphs read, kept from the last batch
            self.cache, self.capacity, self._cos, self._sin = self._graphs.kept
        self._reserve(rows, longest + CAPACITY_STEP)

    def _reserve(self, rows: int, slots: int) -> None:
        """Make the cache hold `rows` rows of at least `slots` slots, keeping what it holds."""
        old = self.cache
        kept = old[0].shape[0] if old else 0
        if self._graphs is not None:  # rows in buckets, at fixed addresses (batch_graphs.py)
            rows = self._graphs.rows_to_hold(rows, kept)
        if old and rows == kept and slots <= self.capacity:
            return
        capacity = max(self.capacity, round_up(max(slots, 1), CAPACITY_STEP))
        with torch.inference_mode():
            self.cache = self.decoder.new_cache(capacity, rows)
            common = min(rows, kept)
            for new, tensor in zip(self.cache, old, strict=False):
                new[:common, :, : self.capacity] = tensor[:common]
            if capacity != self.capacity:
                self._cos, self._sin = self.decoder.rope_tables(capacity)
        self.capacity = capacity
        if self._graphs is not None:
            self._graphs.keep_cache(self.cache, capacity, self._cos, self._sin)

    def _starts(self) -> list[int]:
        """Per row: real (non-padding) tokens cached, i.e. its next slot."""
        pairs = zip(self.lengths, self.num_pads, strict=True)
        return [max(0, length - pads) for length, pads in pairs]

    @torch.inference_mode()
    def forward(
        self, new_tokens: Sequence[torch.Tensor], num_logits: Sequence[int]
    ) -> list[torch.Tensor]:
        """Appends new_tokens[row] (n_row,) to each row's sequence in one forward; returns
        per row its last num_logits[row] rows of logits (num_logits[row], V)."""
        real = [
            tokens[max(0, pads - length) :].to(self.device)  # left padding is not written
            for tokens, length, pads in zip(new_tokens, self.lengths, self.num_pads, strict=True)
        ]
        starts = self._starts()
        for row, tokens in enumerate(new_tokens):
            self.lengths[row] += tokens.numel()
        width = max(tokens.numel() for tokens in real)
        if width == 0:
            return [torch.empty(0, self.vocab_size, device=self.device) for _ in new_tokens]
        if self._graphs is not None:  # the block padded to buckets, replayed as a graph
            return self._graphs.forward(self, real, starts, num_logits)
        rows = len(real)
        self._reserve(rows, max(starts) + width)
        fed = [row for row, tokens in enumerate(real) if tokens.numel()]
        if width == 1 and len(fed) == 1 and self.fast._step is not None:
            return self._token_step(fed[0], real[fed[0]], starts[fed[0]], num_logits)
        ids = torch.zeros(rows, width, dtype=torch.long, device=self.device)
        for row, tokens in enumerate(real):
            ids[row, : tokens.numel()] = tokens
            if 0 < tokens.numel() < width:  # copies of its last token, never attended
                ids[row, tokens.numel() :] = tokens[-1]
        first = torch.tensor(starts, device=self.device)[:, None]  # (B, 1)
        positions = first + torch.arange(width, device=self.device)  # (B, W)
        mask = causal_mask(positions, max(starts) + width, self.capacity)  # (B, W, A)
        sizes = [tokens.numel() for tokens in real]
        prefills = self._prefills(starts, sizes)
        packing = self._packing(sizes, width, starts, mask.shape[-1], prefills)
        hidden = self.decoder.hidden(
            ids,
            positions,
            mask,
            self._cos,
            self._sin,
            self.cache,
            packing=packing,
            prefill=Prefill(0) if prefills else None,  # the block's queries on the kernel
        )  # (B, W, H), or (1, N, H) packed
        counts = [min(int(k), n) for k, n in zip(num_logits, sizes, strict=True)]
        if packing is not None:
            ends = list(accumulate(sizes))  # where each row's tokens end in the packed N
            picked = [hidden[0, end - k : end] for end, k in zip(ends, counts, strict=True)]
        else:
            picked = [
                hidden[row, n - k : n] for row, (n, k) in enumerate(zip(sizes, counts, strict=True))
            ]
        logits = self.decoder.lm_head(torch.cat(picked))  # (sum of counts, V)
        return list(logits.split(counts))

    def _token_step(
        self, row: int, token: torch.Tensor, start: int, num_logits: Sequence[int]
    ) -> list[torch.Tensor]:
        """One token of one row (the others fed nothing) by the single adapter's step
        (backends/token_step.py: a w4a8 draft's token in few calls) over that row's cache,
        so a drafting row of a batch costs what it costs alone."""
        cache = [tensor[row : row + 1] for tensor in self.cache]  # (1, kv_heads, L, d) views
        positions = torch.tensor([[start]], device=self.device)  # (1, 1)
        mask = causal_mask(positions, start + 1, self.capacity)  # (1, 1, A)
        hidden = self.fast._step(token, start, self._cos, self._sin, cache, mask)  # (1, H)
        logits = self.decoder.lm_head(hidden)  # (1, V)
        empty = logits[:0]
        return [
            logits if index == row and num_logits[index] else empty
            for index in range(len(self.lengths))
        ]

    def _prefills(self, starts: list[int], sizes: list[int]) -> tuple[Prefill, ...]:
        """Per row, bit-exact: which of its fed tokens are its prompt's prefill (a fixed
        batch's first forward), as `StaticAdapter` alone would say; () when not bit-exact."""
        if not self.bit_exact:
            return ()
        ends = zip(self.prompt_ends, starts, sizes, strict=True)
        return tuple(Prefill(min(max(end - start, 0), n), start) for end, start, n in ends)

    def _packing(
        self,
        sizes: list[int],
        width: int,
        starts: list[int],
        attend: int,
        prefills: tuple[Prefill, ...] = (),
    ) -> Packing | None:
        """The cells of the (B, W) block that hold a row's tokens, for the linear layers to
        run over those alone (`packs_rows`); None when every row fills the block. Where
        attending row by row, each with its own tokens over its own slots, costs less than
        half of the padded block's attention (B x W queries over `attend` slots), the rows
        attend so (`decoder.ragged_attention`), and always when a row prefills its prompt
        bit-exactly (`prefills`: as alone, by its own blocks)."""
        prefilling = any(prefill.queries for prefill in prefills)
        full = sum(sizes) == len(sizes) * width
        if not prefilling and (not self.packs_rows or full):
            return None
        take = [row * width + column for row, n in enumerate(sizes) for column in range(n)]
        packing = Packing(torch.tensor(take, device=self.device), len(sizes), width)
        own = [
            min(round_up(start + n, ATTEND_STEP), attend)
            for start, n in zip(starts, sizes, strict=True)
        ]
        ragged = sum(n * slots for n, slots in zip(sizes, own, strict=True))
        if not prefilling and 2 * ragged >= len(sizes) * width * attend:
            return packing
        return replace(packing, sizes=tuple(sizes), attend=tuple(own), prefills=prefills)

    def crop(self, num_tokens: Sequence[int]) -> None:
        """Row r keeps at most its first num_tokens[r] sequence tokens cached."""
        self.lengths = [
            max(0, min(length, int(keep)))
            for length, keep in zip(self.lengths, num_tokens, strict=True)
        ]

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor, own: RowCache | None = None) -> RowCache | None:
        """A joining row's cache with `tokens` (n,) appended to `own` (None: empty), by a
        forward of its own: the prompt of a row that joins, in one piece or in chunks."""
        count = tokens.numel()
        if not count:
            return own
        done = 0 if own is None else own.length
        capacity = round_up(done + count, CAPACITY_STEP)
        if own is None or own.tensors[0].shape[2] < capacity:
            tensors = self.decoder.new_cache(capacity, 1)
            for new, kept in zip(tensors, own.tensors if own else [], strict=False):
                new[:, :, :done] = kept[:, :, :done]
            own = RowCache(tensors, done)
        cos, sin = self.decoder.rope_tables(capacity)
        positions = torch.arange(done, done + count, device=self.device)[None]  # (1, n)
        mask = causal_mask(positions, done + count, capacity)  # (1, n, A)
        ids = tokens.to(self.device).view(1, count)
        prefill = Prefill(count, done) if self.bit_exact else None  # as alone, by blocks
        self.decoder.hidden(ids, positions, mask, cos, sin, own.tensors, prefill=prefill)
        own.length = done + count
        return own

    def join(self, prompt: torch.Tensor, own: RowCache | None = None) -> None:
        """Adds a row whose sequence starts with `prompt` (n,), without left padding. Its
        first n - 1 tokens are cached by a forward of their own (or were already: `own`,
        from `prefill`); the last is fed with the row's first round."""
        head = prompt[:-1]
        done = 0 if own is None else own.length
        own = self.prefill(head[done:], own)
        rows = len(self.lengths)
        length = head.numel()
        self._reserve(rows + 1, length + CAPACITY_STEP)
        if own is not None:
            with torch.inference_mode():
                for tensor, kept in zip(self.cache, own.tensors, strict=True):
                    tensor[rows, :, :length] = kept[0, :, :length]
        self.lengths.append(length)
        self.num_pads.append(0)
        self.prompt_ends.append(length)  # its prompt's prefill is cached

    def leave(self, keep: Sequence[int]) -> None:
        """Keeps only the rows `keep`, in that order (the others have ended)."""
        self.lengths = [self.lengths[row] for row in keep]
        self.num_pads = [self.num_pads[row] for row in keep]
        self.prompt_ends = [self.prompt_ends[row] for row in keep]
        if self._graphs is not None and self.cache:  # in place: the graphs read these tensors
            self._graphs.keep_rows(self.cache, keep)
            return
        if not keep:
            self.cache, self.capacity = [], 0
            return
        index = torch.tensor(list(keep), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            self.cache = [tensor.index_select(0, index) for tensor in self.cache]


def batch_adapter(model: Any) -> StaticBatchAdapter | HFBatchAdapter | RowAdapters:
    """The batch adapter of a model. The coordinators that share the rows' forwards: a
    `StaticBatchAdapter` over a `StaticAdapter`, transformers' (`HFBatchAdapter`) over a
    transformers model or its `HFAdapter`. Else the batch form of the single adapter
    (`RowAdapters`, one forward per row): for any other `ModelAdapter` (a fork per row) and
    for a transformers model with a sliding window (each row's window is its own)."""
    if isinstance(model, StaticAdapter):
        return StaticBatchAdapter(model)
    if isinstance(model, HFAdapter):
        model = model.model  # its transformers model: the rows share its forwards
    if isinstance(as_adapter(model), HFAdapter):  # a transformers model (as_adapter: else a
        #                                           typed error naming what to pass)
        if sliding_window(model) is None or getattr(model.config, "is_encoder_decoder", False):
            return HFBatchAdapter(model)  # (an encoder-decoder model: refused there, why)
        return RowAdapters(lambda: HFAdapter(model), cache_bytes_per_token(model))
    return rows_of(model)  # any other backend
