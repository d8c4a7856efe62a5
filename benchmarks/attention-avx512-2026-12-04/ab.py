"""Whole static forwards with and without the attention kernel, interleaved in one process:
the int8 0.5B draft, the w4a8 1.5B target and the bf16 1.5B target, CONTEXT tokens cached
(default 300), median ms of 7 over 1, 4 and 8 new tokens (`decoder.KERNEL_QUERIES` as
shipped against 0: grouped_attention everywhere). Run from the repository root, nothing else
running:

    python benchmarks/attention-avx512-2026-12-04/ab.py [CONTEXT]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from dynaspec.backends import decoder
from dynaspec.backends.static import make_fast
from dynaspec.models.loading import load_model

MODELS = (
    ("draft-int8", "qwen2.5-coder-0.5b", "int8"),
    ("target-w4a8", "qwen2.5-coder-1.5b", "w4a8"),
    ("target-bf16", "qwen2.5-coder-1.5b", None),
)
SIZES = (1, 4, 8)


def main() -> None:
    torch.set_num_threads(2)
    context = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    shipped = decoder.KERNEL_QUERIES
    adapters = {}
    for name, model, quantize in MODELS:
        loaded = load_model(model)
        adapters[name] = make_fast(
            loaded[0], static=True, quantize=quantize, release=quantize is not None
        )
        del loaded
    prompt = torch.randint(100, 20000, (1, context))
    for adapter in adapters.values():
        adapter.begin(prompt, max_length=2048)
        adapter.forward(prompt[0], 1)
    times: dict[tuple[str, int, int], list[float]] = {}
    for _ in range(7):
        for n in SIZES:
            for name, adapter in adapters.items():
                for queries in (shipped, 0):
                    decoder.KERNEL_QUERIES = queries
                    adapter.crop(context)
                    tokens = torch.randint(100, 20000, (n,))
                    start = time.perf_counter()
                    adapter.forward(tokens, n)
                    elapsed = time.perf_counter() - start
                    times.setdefault((name, n, queries), []).append(elapsed)
    for name in adapters:
        costs = " ".join(
            f"T({n}) {1000 * np.median(times[(name, n, shipped)]):.1f}"
            f" vs {1000 * np.median(times[(name, n, 0)]):.1f}"
            for n in SIZES
        )
        print(name, "context", context, "with vs without:", costs)


if __name__ == "__main__":
    main()
