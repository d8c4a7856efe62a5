"""The w8a8 kernel against torch's bf16 linear on the 1.5B target's layer shapes, over 1, 33
and 264 rows (random weights; median of 7 after 3 untimed):   python w8a8_shapes.py"""

import statistics
import time

import torch

from dynaspec.backends import quant, w8a8_kernel

torch.manual_seed(0)
SHAPES = [
    ("q/o 1536->1536", 1536, 1536),
    ("k/v 1536->256", 256, 1536),
    ("gate/up 1536->8960", 8960, 1536),
    ("down 8960->1536", 1536, 8960),
]


def median_time(function) -> float:
    for _ in range(3):
        function()
    times = []
    for _ in range(7):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


for name, n_out, n_in in SHAPES:
    weight = (torch.randn(n_out, n_in) * 0.02).to(torch.bfloat16)
    kernel = quant._integer_kernel(w8a8_kernel, n_out, n_in)
    integer = quant.Int8Linear(weight, None, kernel=kernel)
    dense = torch.nn.Linear(n_in, n_out, bias=False).to(torch.bfloat16)
    dense.weight.data = weight
    for rows in (1, 33, 264):
        x = torch.randn(rows, n_in).to(torch.bfloat16)
        w8a8 = median_time(lambda x=x, layer=integer: layer(x))
        bf16 = median_time(lambda x=x, layer=dense: layer(x))
        macs = rows * n_in * n_out
        print(
            f"{name} rows {rows}: w8a8 {w8a8 * 1e3:.2f} ms ({macs / w8a8 / 1e9:.0f} GMAC/s)"
            f"  bf16 {bf16 * 1e3:.2f} ms ({macs / bf16 / 1e9:.0f} GMAC/s)"
        )
