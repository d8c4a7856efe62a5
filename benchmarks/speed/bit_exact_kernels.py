"""Per-call times of the bit-exact fast path's kernels against what they replaced, on
Qwen2.5-1.5B's shapes (hidden 1536, intermediate 8960, 12 query heads over 2 key/value heads
of 128, vocabulary 151936), for M tokens a forward.

    python benchmarks/speed/bit_exact_kernels.py [--repeats 30] [--sizes 1,4,8,16,33]

Linear: dynaspec's row-invariant bf16 kernel (backends/kernels/bf16.py) against oneDNN's
prepacked bf16 product (what static=True ran before), per layer shape and for one decoder
layer's seven products. Attention: M queries over 300 cached slots, the attention kernel
(what a bit-exact target runs past the prompt's prefill) against the old rule (the kernel up
to decoder.KERNEL_QUERIES queries, grouped_attention beyond). Random weights and inputs: no
model is loaded. Each pair is timed interleaved, best of --repeats calls; run it on a quiet
machine (figures move by 20% and more while other work runs).
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from dynaspec.backends import decoder
from dynaspec.backends.kernels import bf16
from dynaspec.backends.kernels.attention import KERNEL as ATTENTION

HIDDEN, INTERMEDIATE, VOCAB = 1536, 8960, 151936
LAYER = {  # (out, in) of one decoder layer's products, and how many of each
    "q/o 1536x1536": ((HIDDEN, HIDDEN), 2),
    "k/v 256x1536": ((256, HIDDEN), 2),
    "gate/up 8960x1536": ((INTERMEDIATE, HIDDEN), 2),
    "down 1536x8960": ((HIDDEN, INTERMEDIATE), 1),
}


def best_of(calls: dict[str, object], repeats: int) -> dict[str, float]:
    """Milliseconds per call, the best of `repeats` rounds, the calls interleaved."""
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: seconds * 1e3 for name, seconds in best.items()}


def linear_times(sizes: list[int], repeats: int, head: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    shapes = dict(LAYER)
    if head:
        shapes["head 151936x1536"] = ((VOCAB, HIDDEN), 1)
    print(f"linear, ms a call (best of {repeats}): bit-exact kernel / oneDNN prepacked")
    layer = {m: [0.0, 0.0] for m in sizes}
    for label, ((rows, columns), count) in shapes.items():
        weight = torch.randn(rows, columns, generator=generator).to(torch.bfloat16)
        tiled = bf16.KERNEL.tiled(weight)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 1)
        cells = []
        for m in sizes:
            x = torch.randn(m, columns, generator=generator).to(torch.bfloat16)
            times = best_of(
                {
                    "exact": lambda x=x, w=tiled: bf16.KERNEL.matmul(x, w),
                    "onednn": lambda x=x, w=packed: torch.ops.mkldnn._linear_pointwise(
                        x, w, None, "none", [], ""
                    ),
                },
                repeats,
            )
            cells.append(f"M={m}: {times['exact']:.2f} / {times['onednn']:.2f}")
            if label in LAYER:
                layer[m][0] += count * times["exact"]
                layer[m][1] += count * times["onednn"]
        print(f"  {label:18s} " + "   ".join(cells), flush=True)
    cells = [f"M={m}: {a:.2f} / {b:.2f} ({a / b:.2f}x)" for m, (a, b) in layer.items()]
    print("  one layer's 7      " + "   ".join(cells), flush=True)


def attention_times(sizes: list[int], repeats: int, cached: int = 300) -> None:
    generator = torch.Generator().manual_seed(1)
    length = 512
    keys, values = (
        torch.randn(1, 2, length, 128, generator=generator).to(torch.bfloat16) for _ in range(2)
    )
    print(f"attention over {cached} slots, us a call: kernel / old rule")
    cells = []
    for m in sizes:
        query = torch.randn(1, 12, m, 128, generator=generator).to(torch.bfloat16)
        slots = torch.arange(cached - m, cached)
        attend = min(-(-cached // 64) * 64, length)
        mask = (torch.arange(attend) <= slots[:, None])[None]
        times = best_of(
            {
                "kernel": lambda q=query, k=mask: ATTENTION.attend(q, keys, values, k, 0.088),
                "old": lambda q=query, k=mask: decoder.attention(q, keys, values, k, 0.088),
            },
            repeats,
        )
        cells.append(f"M={m}: {times['kernel'] * 1e3:.0f} / {times['old'] * 1e3:.0f}")
    print("  " + "   ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--sizes", default="1,4,8,16,33")
    parser.add_argument("--head", action="store_true", help="also the 151936-row head")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(
        f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    linear_times(sizes, args.repeats, args.head)
    attention_times(sizes, args.repeats)


if __name__ == "__main__":
    main()
