"""One step of the 0.5B draft with 300 tokens cached, per quantization, interleaved in one
process: int8 (as before), w4a8 as a target gets it (layers finer than 4 bits in int8: for
this Q5_0 model, every layer) and w4a8 as a draft gets it (`make_fast(draft=True)`: every
layer in 4 bits). Median ms of 15, and the weights' bytes. Nothing else running:

    python benchmarks/draft-w4a8-avx512-2026-12-04/draft_step.py
"""

from __future__ import annotations

import collections
import time

import numpy as np
import torch

from dynaspec.backends.static import make_fast
from dynaspec.models.loading import load_model

VARIANTS = (("int8", "int8", True), ("w4a8 as a target", "w4a8", False), ("w4a8", "w4a8", True))


def main() -> None:
    torch.set_num_threads(2)
    adapters = {}
    for name, quantize, draft in VARIANTS:
        model = load_model("qwen2.5-coder-0.5b")[0]
        adapters[name] = make_fast(model, static=True, quantize=quantize, draft=draft, release=True)
        del model
        kinds = collections.Counter(
            type(m).__name__ for m in adapters[name].decoder.modules() if "Linear" in type(m).__name__
        )
        print(name, dict(kinds))
    prompt = torch.randint(100, 20000, (1, 300))
    for adapter in adapters.values():
        adapter.begin(prompt, max_length=2048)
        adapter.forward(prompt[0], 1)
    times: dict[str, list[float]] = {name: [] for name in adapters}
    for _ in range(15):
        for name, adapter in adapters.items():
            adapter.crop(300)
            start = time.perf_counter()
            adapter.forward(torch.randint(100, 20000, (1,)), 1)
            times[name].append(time.perf_counter() - start)
    for name, adapter in adapters.items():
        print(
            f"{name:18s} {1000 * np.median(times[name]):6.1f} ms a step, "
            f"{adapter.weight_bytes() / 1e6:5.0f} MB of weights"
        )


if __name__ == "__main__":
    main()
