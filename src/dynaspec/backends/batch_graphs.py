"""CUDA graphs for the static batch adapter (the server's continuous batching): one graph per
bucket of rows and bucket of tokens per row, replayed every round (as vLLM and SGLang capture
a graph per batch size).

A graph replays fixed shapes at fixed addresses, so in `StaticBatchAdapter` with graphs
(a `StaticAdapter` made with `graphs=True` / `FastConfig.cuda_graphs`):

- the cache holds its rows in buckets (`rows_to_hold`: 1, 2, 4, ... 32 rows, never fewer
  while the adapter lives), so a row that joins is written into a spare row and the cache
  keeps its address; a row that leaves is compacted away in place (`keep_rows`), not by a
  copy into new tensors. A forward over B live rows runs over the first bucket(B) rows: the
  spare ones are fed a token at slot 0 of their own row, which no live row reads;
- a forward of n_r tokens per row runs as one block of bucket(max n_r) tokens per row (the
  columns past a row's tokens hold token 0 at the slots right after its own, which nothing
  attends before the row's next forward overwrites them, as the single adapter's padding
  does: backends/graphs.py), attending over the whole cache (one shape), with no packing;
- the ids and positions are the graph's inputs (the mask is computed inside it from the
  positions); the cache and the rotary tables are keyed by the cache's address, its length
  and its rows, so the graphs are captured again when the cache grows (256 slots at a time)
  or holds a larger bucket of rows;
- the graphs and the cache they read belong to the `StaticAdapter` (`batch_graphs`) and are
  lent to one batch adapter at a time: the next batch (the next `generate` call over a
  batch) starts on the same cache and replays the same graphs, so it captures only what is
  new to it. A batch adapter made while another still lives gets graphs and a cache of its
  own. The cache stays allocated between batches (its largest rows x slots so far) until
  the static adapter goes.

Past the largest bucket (a batch's first forward over its prompts, more than 32 rows) the
same block runs uncaptured. On the CPU the seam (`GraphForwards`) is an identity, so the
bucketing is the same code there, tested for exact logits against the unbucketed adapter;
the loaders never ask for it on the CPU (models/devices.use_cuda_graphs).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from dynaspec.backends.graphs import GraphForwards, bucket_for
from dynaspec.backends.static import StaticAdapter, causal_mask


class BatchGraphs:
    """The graphs of one `StaticBatchAdapter`, keyed by (row bucket, token bucket)."""

    def __init__(self, fast: StaticAdapter) -> None:
        self.buckets = fast.fast.buckets  # for rows and for tokens per row
        self.decoder = fast.decoder
        self.graphs = GraphForwards(self._forward, fast.device)
        # what the captured graphs read besides their inputs (set before every call)
        self._cache: list[torch.Tensor] = []
        self._cos = self._sin = torch.empty(0)
        # the cache of the batch adapter it was lent to last: (tensors, length, cos, sin)
        self.kept: tuple[list[torch.Tensor], int, torch.Tensor, torch.Tensor] = (
            [],
            0,
            self._cos,
            self._sin,
        )
        self._owner: Any = None  # a weak reference to the batch adapter it is lent to
        self._lock = threading.Lock()

    def lend(self, owner: Any) -> bool:
        """Lend these graphs (and the cache they read) to the batch adapter `owner`, unless
        the one they were lent to before still lives."""
        with self._lock:
            if self._owner is not None and self._owner() is not None:
                return False
            self._owner = weakref.ref(owner)
            return True

    def keep_cache(
        self, cache: list[torch.Tensor], capacity: int, cos: torch.Tensor, sin: torch.Tensor
    ) -> None:
        """The cache the next batch adapter starts on (`kept`)."""
        self.kept = (cache, capacity, cos, sin)

    @property
    def enabled(self) -> bool:
        """Whether forwards are captured (CUDA), not only bucketed."""
        return self.graphs.enabled

    def rows_to_hold(self, rows: int, held: int) -> int:
        """Rows the cache holds for `rows` live ones when it holds `held` now: a bucket, never
        fewer than it holds (the rows keep their addresses)."""
        return max(held, bucket_for(rows, self.buckets))

    def keep_rows(self, cache: Sequence[torch.Tensor], keep: Sequence[int]) -> None:
        """Rows `keep` of every cache tensor moved, in that order, to its first rows, in
        place: the tensors keep their addresses (and the graphs that read them)."""
        if not keep or list(keep) == list(range(len(keep))):
            return
        index = torch.tensor(list(keep), dtype=torch.long, device=cache[0].device)
        with torch.inference_mode():
            for tensor in cache:
                tensor[: len(keep)] = tensor.index_select(0, index)

    def forward(
        self,
        adapter: Any,
        real: Sequence[torch.Tensor],
        starts: Sequence[int],
        num_logits: Sequence[int],
    ) -> list[torch.Tensor]:
        """`StaticBatchAdapter.forward` over the bucketed block of `adapter` (a
        `StaticBatchAdapter`: its cache, grown by its `_reserve`): `real[row]` (n_row,) fed
        at slots `starts[row]` on; per row its last num_logits[row] rows of logits."""
        sizes = [tokens.numel() for tokens in real]
        width = bucket_for(max(sizes), self.buckets)
        adapter._reserve(len(real), max(starts) + width)
        held = adapter.cache[0].shape[0]
        rows = bucket_for(len(real), self.buckets) if len(real) <= self.buckets[-1] else held
        device = adapter.device
        spare = [torch.zeros(0, dtype=torch.long, device=device)] * (rows - len(real))
        block = [tokens.to(device=device, dtype=torch.long) for tokens in [*real, *spare]]
        ids = torch.nn.utils.rnn.pad_sequence(block, batch_first=True)  # (R, <= W)
        ids = torch.nn.functional.pad(ids, (0, width - ids.shape[1]))  # (R, W): 0 after
        first = torch.tensor([*starts, *[0] * len(spare)], device=device)[:, None]  # (R, 1)
        positions = first + torch.arange(width, device=device)  # (R, W)
        self._cache, self._cos, self._sin = adapter.cache, adapter._cos, adapter._sin
        if max(rows, width) <= self.buckets[-1]:
            generation = (adapter.capacity, held, adapter.cache[0].data_ptr())
            hidden = self.graphs((rows, width), generation, ids, positions)
        else:
            hidden = self._forward(ids, positions)  # (R, W, H), uncaptured
        counts = [min(int(k), n) for k, n in zip(num_logits, sizes, strict=True)]
        picked = [
            row * width + column
            for row, (n, k) in enumerate(zip(sizes, counts, strict=True))
            for column in range(n - k, n)
        ]
        index = torch.tensor(picked, dtype=torch.long, device=device)
        chosen = hidden.reshape(rows * width, -1).index_select(0, index)  # (sum of counts, H)
        return list(self.decoder.lm_head(chosen).split(counts))

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """(R, W, H) hidden states of the block over the first R rows of the cache (what a
        graph records: the mask computed from the positions, over the whole cache)."""
        rows = ids.shape[0]
        capacity = self._cache[0].shape[2]
        mask = causal_mask(positions, capacity, capacity)  # (R, W, capacity)
        cache = [tensor[:rows] for tensor in self._cache]  # views: the same addresses
        return self.decoder.hidden(ids, positions, mask, self._cos, self._sin, cache)


def batch_graphs(fast: StaticAdapter, owner: Any) -> BatchGraphs | None:
    """The batch graphs of a static adapter made with CUDA graphs (captured on CUDA,
    bucketed elsewhere), lent to the batch adapter `owner`: the adapter's own, else (another
    batch adapter still holds those) new ones; None for any other adapter (its batches run
    as they always did)."""
    if not fast.fast.cuda_graphs or fast.bit_exact or fast._step is not None:
        return None
    with _LOCK:
        held = _HELD.get(fast)
        if held is None:
            held = _HELD[fast] = BatchGraphs(fast)
    if held.lend(owner):
        return held
    graphs = BatchGraphs(fast)
    graphs.lend(owner)
    return graphs


# Each static adapter's batch graphs, for as long as the adapter lives.
_HELD: weakref.WeakKeyDictionary[StaticAdapter, BatchGraphs] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()
