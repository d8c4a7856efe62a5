"""torch.profiler over the w8a8 target's forward of 265 new tokens (a prompt): torch's own
operators by self time; the w8a8 kernel's calls (ctypes) are not among them, so the wall
time less their sum is the kernel's.   python prefill_profile.py"""

import time

import torch
from torch.profiler import ProfilerActivity, profile

from dynaspec import load_pair

pair = load_pair("qwen2.5-coder", quantize="w8a8", draft_quantize="w4a8")
target = pair.target
ids = torch.randint(100, 20000, (1, 300), generator=torch.Generator().manual_seed(0))[0]


def prefill() -> None:
    target.begin(ids[None], max_length=700)
    target.forward(ids[:265], 1)


for _ in range(2):
    prefill()
started = time.perf_counter()
prefill()
print("wall", time.perf_counter() - started)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    prefill()
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
