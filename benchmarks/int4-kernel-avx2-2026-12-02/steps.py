"""The static 1.5B target quantized each way (default int4 and int8; or the MODEs given, e.g.
int8 w8a8) in one process, forwards of each interleaved, 200 tokens cached: median ms of 5
for a forward over n new tokens (the T(n) figures in docs/design/fast-path.md, this folder's
README and benchmarks/w8a8-avx512-2026-12-04). Run from the repository root, nothing else
running:

    python benchmarks/int4-kernel-avx2-2026-12-02/steps.py [MODE ...] [--sizes 1,2,4,6,8]
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from dynaspec.backends.static import make_fast
from dynaspec.models.loading import load_model

SIZES = (1, 2, 4, 8, 16)


def main() -> None:
    torch.set_num_threads(2)
    arguments = sys.argv[1:]
    sizes = SIZES
    if "--sizes" in arguments:
        at = arguments.index("--sizes")
        sizes = tuple(int(n) for n in arguments[at + 1].split(","))
        arguments = arguments[:at] + arguments[at + 2 :]
    adapters = {}
    for quantize in arguments or ("int4", "int8"):
        loaded = load_model("qwen2.5-coder-1.5b")
        adapters[quantize] = make_fast(loaded[0], static=True, quantize=quantize, release=True)
        del loaded
    prompt = torch.randint(100, 20000, (1, 200))
    for adapter in adapters.values():
        adapter.begin(prompt, max_length=1024)
        adapter.forward(prompt[0], 1)
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(5):
        for n in sizes:
            for name, adapter in adapters.items():
                adapter.crop(200)
                tokens = torch.randint(100, 20000, (n,))
                start = time.perf_counter()
                adapter.forward(tokens, n)
                times.setdefault((name, n), []).append(time.perf_counter() - start)
    for name in adapters:
        costs = " ".join(f"T({n})={1000 * np.median(times[(name, n)]):.0f}ms" for n in sizes)
        print(name, costs)


if __name__ == "__main__":
    main()
