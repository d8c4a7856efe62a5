"""A static 1.5B target's prefill and decode steps: MODE is a quantize= mode (w4a8, w8a8,
int8, int4) or bf16. Three times: a 300-token prompt of random ids fed at once (the last
token's logits only, as generate asks), then 20 one-token steps. Run from the repository
root, nothing else running:

    python benchmarks/prefill-avx512-2026-12-04/prefill.py MODE
"""

from __future__ import annotations

import sys
import time

import torch

from dynaspec.backends.static import make_fast
from dynaspec.models.loading import load_model


def main() -> None:
    torch.set_num_threads(2)
    mode = sys.argv[1]
    quantize = None if mode == "bf16" else mode
    loaded = load_model("qwen2.5-coder-1.5b")
    adapter = make_fast(loaded[0], static=True, quantize=quantize, release=quantize is not None)
    del loaded
    prompt = torch.randint(1000, 30000, (1, 300))
    for _ in range(3):
        adapter.begin(prompt, max_length=1024)
        start = time.perf_counter()
        adapter.forward(prompt[0], 1)
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for step in range(20):
            adapter.forward(torch.tensor([5 + step]), 1)
        decode = (time.perf_counter() - start) / 20
        print(
            f"{mode} prefill of 300 tokens: {prefill:.2f} s ({1000 * prefill / 300:.1f} ms a "
            f"token); decode {1000 * decode:.1f} ms a token",
            flush=True,
        )


if __name__ == "__main__":
    main()
