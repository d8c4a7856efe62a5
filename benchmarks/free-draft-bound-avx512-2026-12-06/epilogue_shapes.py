"""The w4a8 kernel on the 0.5B draft's and the 1.5B target's layer shapes over 1, 8, 33 and
300 rows (random weights; median of 7 after 3 untimed), for the tree on PYTHONPATH:
python epilogue_shapes.py LABEL"""

import statistics
import sys
import time

import torch

from dynaspec.backends import quant, w4a8_kernel

torch.manual_seed(0)
torch.set_num_threads(2)
SHAPES = [
    ("d q/o", 896, 896),
    ("d gate/up", 4864, 896),
    ("d down", 896, 4864),
    ("t q/o", 1536, 1536),
    ("t gate/up", 8960, 1536),
    ("t down", 1536, 8960),
]


def mt(f, n=7):
    for _ in range(3):
        f()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


out = []
for name, n_out, n_in in SHAPES:
    w = (torch.randn(n_out, n_in) * 0.02).to(torch.bfloat16)
    w4 = quant.Int4Linear(w, None, kernel=quant._integer_kernel(w4a8_kernel, n_out, n_in))
    for rows in (1, 8, 33, 300):
        x = torch.randn(rows, n_in).to(torch.bfloat16)
        t = mt(lambda x=x, w4=w4: w4(x))
        out.append(f"{name} {rows}: {t * 1e3:.3f} ms {rows * n_in * n_out / t / 1e9:.0f} GMAC/s")
print(sys.argv[1])
print("\n".join(out))
