"""The w4a8 kernel against the w8a8 kernel and torch's bf16 linear on the 0.5B draft's layer
shapes over 1, 33 and 408 rows (random weights; median of 7 after 3 untimed):
python draft_shapes.py"""

import statistics
import time

import torch

from dynaspec.backends import quant, w4a8_kernel, w8a8_kernel

torch.manual_seed(0)
SHAPES = [
    ("q/o 896->896", 896, 896),
    ("k/v 896->128", 128, 896),
    ("gate/up 896->4864", 4864, 896),
    ("down 4864->896", 896, 4864),
]


def median_time(f):
    for _ in range(3):
        f()
    ts = []
    for _ in range(7):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


for name, n_out, n_in in SHAPES:
    weight = (torch.randn(n_out, n_in) * 0.02).to(torch.bfloat16)
    w4 = quant.Int4Linear(weight, None, kernel=quant._integer_kernel(w4a8_kernel, n_out, n_in))
    w8 = quant.Int8Linear(weight, None, kernel=quant._integer_kernel(w8a8_kernel, n_out, n_in))
    dense = torch.nn.Linear(n_in, n_out, bias=False).to(torch.bfloat16)
    dense.weight.data = weight
    for rows in (1, 33, 408):
        x = torch.randn(rows, n_in).to(torch.bfloat16)
        r = {
            k: median_time(lambda x=x, layer=layer: layer(x))
            for k, layer in (("w4a8", w4), ("w8a8", w8), ("bf16", dense))
        }
        macs = rows * n_in * n_out
        print(
            f"{name} rows {rows}: "
            + "  ".join(
                f"{k} {v * 1e3:.2f} ms ({macs / v / 1e9:.0f} GMAC/s)" for k, v in r.items()
            ),
            flush=True,
        )
