"""CUDA graphs for the static path's forwards: one graph per bucket, replayed every round.

On a GPU a forward of a 1.5B model at batch 1 is bound by the host launching its kernels
(about 20x off what its weights take to stream in: benchmarks/gpu/), which is what CUDA
graphs remove: the kernels of one forward are recorded once and replayed with one launch
(gpt-fast reaches the bandwidth limit this way, through torch.compile's "reduce-overhead";
vLLM and SGLang capture a graph per batch size and speculative length). A graph replays
fixed shapes at fixed addresses, so:

- a forward over n tokens is padded to the next *bucket* (`bucket_for`: 1, 2, 4, 8, 16, 32
  by default; longer forwards, such as a prefill, run as they are). The padding tokens sit
  in the slots right after the real ones, which the real tokens never attend (they come
  later), and the position counter never covers them: the committed cache state is the
  slots before the counter, exactly as without padding, and the next forward overwrites
  them. A verification of 9 tokens therefore costs what one of 16 does, which is what the
  cost model learns per bucket (policies/costs.py) so that the adaptive rule knows it;
- the per-call inputs (token ids, positions, the attention mask) are copied into buffers
  the graph reads; the cache and the rotary tables are the adapter's own tensors, so a
  graph is keyed by the cache's address and length and captured again when the cache is
  reallocated (it grows 256 slots at a time).

`GraphForwards` is the seam: where the device is not CUDA (or capture is off) it calls the
forward as it is, so the CPU path never crosses it and the bucket padding around it is the
same code on both (tested on CPU for exact logits and cache contents; the capture itself by
the tests marked `cuda`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# Untimed runs of a forward on a side stream before it is captured (cuBLAS and the
# caching allocator settle their workspaces there, as torch.cuda.graphs' docs advise).
WARMUP_RUNS = 2

Forward = Callable[..., torch.Tensor]


def bucket_for(num_tokens: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `num_tokens`; `num_tokens` itself past the largest."""
    return next((bucket for bucket in buckets if bucket >= num_tokens), num_tokens)


def verify_buckets(model: Any) -> tuple[int, ...]:
    """The widths `model`'s forwards are padded to (its `verify_buckets`), () where they
    are not padded (a transformers model, an eager static adapter)."""
    buckets = getattr(model, "verify_buckets", ())
    return tuple(buckets) if isinstance(buckets, tuple) else ()


def captures(device: torch.device, enabled: bool) -> bool:
    """Whether forwards on `device` are captured as CUDA graphs (CUDA only)."""
    return enabled and device.type == "cuda" and torch.cuda.is_available()


class GraphForwards:
    """Runs `forward(*inputs)` for a key (a bucket, the cache's address and length): on CUDA
    through a CUDA graph captured at the key's first call, elsewhere directly (the seam).

    `inputs` are the per-call tensors (their shapes fixed per key); everything else the
    forward reads (weights, caches, rotary tables) must live at fixed addresses for as long
    as the key does. The returned tensor of a replay is the graph's own output buffer: use it
    before the next call."""

    def __init__(self, forward: Forward, device: torch.device, enabled: bool = True) -> None:
        self.forward = forward
        self.device = device
        self.enabled = captures(device, enabled)
        self.capture_count = 0  # graphs captured so far (a capture per new key)
        self._graphs: dict[Any, tuple[Any, tuple[torch.Tensor, ...], torch.Tensor]] = {}
        self._generation: Any = None  # what the captured graphs' persistent tensors were
        self._pool: Any = None  # one memory pool for every graph of this forward

    def __call__(self, key: Any, generation: Any, *inputs: torch.Tensor) -> torch.Tensor:
        """`generation` names the persistent tensors (e.g. the cache's address and length):
        when it changes, every captured graph is dropped (they read the old tensors)."""
        if not self.enabled:
            return self.forward(*inputs)
        if generation != self._generation:
            self._graphs.clear()
            self._generation = generation
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(inputs)
            self._graphs[key] = entry
        graph, buffers, output = entry
        for buffer, value in zip(buffers, inputs, strict=True):
            buffer.copy_(value, non_blocking=True)
        graph.replay()
        return output

    def _capture(
        self, inputs: Sequence[torch.Tensor]
    ) -> tuple[Any, tuple[torch.Tensor, ...], torch.Tensor]:
        """Warm up on a side stream, capture one run, replay it for this call's result."""
        buffers = tuple(value.clone() for value in inputs)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                self.forward(*buffers)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            output = self.forward(*buffers)
        self.capture_count += 1
        return graph, buffers, output

    def fork(self, forward: Forward) -> GraphForwards:
        """A runner of its own (no graphs yet) for `forward` on the same device."""
        twin = GraphForwards(forward, self.device)
        twin.enabled = self.enabled
        return twin
