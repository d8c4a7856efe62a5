"""The w8a8 target's forward over 265 new tokens (a prompt), and over 33 and 1 after 265
cached; median of the last 3 of 4 runs.   python w8a8_rows.py"""

import statistics
import time

import torch

from dynaspec import load_pair

pair = load_pair("qwen2.5-coder", quantize="w8a8", draft_quantize="w4a8")
target = pair.target
ids = torch.randint(100, 20000, (1, 300), generator=torch.Generator().manual_seed(0))[0]
for rows in (265, 33, 1):
    times = []
    for _ in range(4):
        target.begin(ids[None], max_length=700)
        if rows == 265:
            fed, logits = ids[:265], 1
        else:
            target.forward(ids[:265], 1)
            fed, logits = ids[265 : 265 + rows], rows
        started = time.perf_counter()
        target.forward(fed, logits)
        times.append(time.perf_counter() - started)
    print(rows, "rows", f"{statistics.median(times[1:]) * 1e3:.0f} ms")
