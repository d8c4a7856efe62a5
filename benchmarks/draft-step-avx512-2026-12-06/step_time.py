"""A drafted token's forward (logits included) of the w4a8 0.5B draft, 300 tokens cached:
the few-call step (backends/token_step.py) against the layer-by-layer forward, interleaved,
median of 9 runs of 50 tokens; and the same token's argmax and finite check on its logits
as before (bf16 argmax, isfinite(...).all()) and now.   python step_time.py"""

import statistics
import time

import torch

from dynaspec import load_pair
from dynaspec.core.validation import all_finite
from dynaspec.core.verify import argmax

pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
draft = pair.draft
ids = torch.randint(100, 20000, (1, 300), generator=torch.Generator().manual_seed(0))
draft.begin(ids, max_length=600)
draft.forward(ids[0], 1)
token = torch.tensor([123])
step = draft._step


def run(n: int = 50) -> float:
    started = time.perf_counter()
    for _ in range(n):
        draft.forward(token, 1)
        draft.crop(draft.num_cached - 1)
    return (time.perf_counter() - started) / n * 1e3


times = {"step": [], "layers": []}
for _ in range(2):
    run(10)
for _ in range(9):
    for name in times:
        draft._step = step if name == "step" else None
        times[name].append(run())
for name, values in times.items():
    print(f"{name}: {statistics.median(values):.2f} ms a drafted token (min {min(values):.2f})")


def per_call(function, number: int = 200) -> float:
    started = time.perf_counter()
    for _ in range(number):
        function()
    return (time.perf_counter() - started) / number * 1e6


for rows in (1, 11, 33):
    logits = torch.randn(rows, 151936).to(torch.bfloat16)
    before = per_call(lambda x=logits: (x.argmax(-1), torch.isfinite(x).all()))
    after = per_call(lambda x=logits: (argmax(x), all_finite(x)))
    print(f"{rows} rows of logits: argmax + finite check {before:.0f} -> {after:.0f} us")
