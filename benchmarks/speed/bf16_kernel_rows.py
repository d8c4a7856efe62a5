"""The row-invariant bf16 kernel (backends/kernels/bf16.py) against oneDNN's bf16 product
(`F.linear` in bf16), per Qwen2.5-1.5B layer shape and row count M: median milliseconds a
call over interleaved rounds, and the kernel's time over oneDNN's.

    python benchmarks/speed/bf16_kernel_rows.py [--sizes 1,8,33,64,128,300] [--repeats 9]
        [--head] [--baseline CSRC_DIR] [--cold-mb 96] [--cpu-time]

`--baseline` times an older copy of the kernel too, in the same rounds (before and after on
one machine at one time): a folder holding its bf16_matmul.cpp and headers (for instance
`git -C /work/main archive <commit> src/dynaspec/backends/kernels/csrc | tar -x -C /tmp/old`),
compiled here with build.py's flags; its output is checked bitwise against the kernel's.
Random weights and inputs, no model loaded; each call takes the next of as many copies of the
weights as fill `--cold-mb` (read from memory, as in a forward, not from the shared L3 cache).
Wall-clock figures move by 10-20% and more while other work runs; `--cpu-time` times one
thread by its own CPU time instead (per-core cost; the two-thread split is not in it).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from dynaspec.backends.kernels import bf16
from dynaspec.backends.kernels.build import _openmp_runtime, compiler

SHAPES = {  # label: (out, in)
    "q/o 1536x1536": (1536, 1536),
    "k/v 256x1536": (256, 1536),
    "gate/up 8960x1536": (8960, 1536),
    "down 1536x8960": (1536, 8960),
}
HEAD = ("head 151936x1536", (151936, 1536))


def baseline_function(folder: Path, scratch: Path) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    """The bf16 kernel compiled from `folder`'s bf16_matmul.cpp, as build.py compiles it."""
    runtime = _openmp_runtime()
    link = [str(runtime), f"-Wl,-rpath,{runtime.parent}"] if runtime else []
    library = scratch / "baseline_bf16.so"
    source = folder / "bf16_matmul.cpp"
    flags = bf16.KERNEL.SPEC.flags
    command = [compiler(), *flags, "-o", str(library), str(source), "-Wl,--no-as-needed", *link]
    subprocess.run(command, check=True)
    function = ctypes.CDLL(str(library)).dynaspec_bf16_matmul
    function.argtypes = list(bf16.KERNEL.SPEC.argtypes)
    function.restype = None
    return function


def calling(function, x: torch.Tensor, tiled: torch.Tensor):
    """A call of a C kernel with the bf16 kernel's arguments, into a fresh bf16 output."""

    def call() -> torch.Tensor:
        out = torch.empty(x.shape[0], tiled.shape[0] * bf16.KERNEL.ROWS, dtype=torch.bfloat16)
        threads = torch.get_num_threads()
        function(x.data_ptr(), x.shape[0], x.shape[1], tiled.data_ptr(), None, out.shape[1],
                 out.data_ptr(), threads, 1)  # fmt: skip
        return out

    return call


def medians(calls: dict[str, object], repeats: int, copies: int, clock) -> dict[str, float]:
    """Median milliseconds a call over `repeats` rounds, the calls interleaved in each; each
    call takes the weights' next copy (cold: read from memory, as in a model's forward)."""
    times: dict[str, list[float]] = {name: [] for name in calls}
    turn = 0
    for call in calls.values():  # warm-up: first touches
        call(turn)
    for _ in range(repeats):
        for name, call in calls.items():
            turn = (turn + 1) % copies
            started = clock()
            call(turn)
            times[name].append(clock() - started)
    return {name: statistics.median(seconds) * 1e3 for name, seconds in times.items()}


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,8,33,64,128,300")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--head", action="store_true", help="also the 151936-row head")
    parser.add_argument("--baseline", type=Path, help="a csrc folder of an older kernel")
    parser.add_argument(
        "--cold-mb", type=int, default=96, help="weight copies to cycle through (MB; 0: one)"
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="one thread, timed by its CPU time (steadier while other work runs)",
    )
    return parser.parse_args()


def main() -> None:
    args = arguments()
    sizes = [int(size) for size in args.sizes.split(",")]
    shapes = dict(SHAPES)
    if args.head:
        shapes[HEAD[0]] = HEAD[1]
    if args.cpu_time:
        torch.set_num_threads(1)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {clock.__name__}, "
          f"median of {args.repeats} interleaved rounds, weights cycled over "
          f"{args.cold_mb} MB; ms a call, and the kernel over oneDNN")  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as scratch:
        old = baseline_function(args.baseline, Path(scratch)) if args.baseline else None
        for label, (rows, columns) in shapes.items():
            weight = torch.randn(rows, columns, generator=generator).to(torch.bfloat16)
            copies = max(1, -(-args.cold_mb * 2**20 // weight.nbytes))
            weights = [weight.clone() for _ in range(copies)]
            tiled = [bf16.KERNEL.tiled(weight) for _ in range(copies)]
            for m in sizes:
                x = torch.randn(m, columns, generator=generator).to(torch.bfloat16)
                calls = {
                    "kernel": lambda i, x=x, w=tiled: bf16.KERNEL.matmul(x, w[i]),
                    "onednn": lambda i, x=x, w=weights: F.linear(x, w[i]),
                }
                if old is not None:
                    before = [calling(old, x, t) for t in tiled]
                    calls["before"] = lambda i, before=before: before[i]()
                    assert torch.equal(calls["before"](0), calls["kernel"](0)), (label, m)
                t = medians(calls, args.repeats, copies, clock)
                line = f"  {label:18s} M={m:3d}: kernel {t['kernel']:8.2f}  oneDNN "
                line += f"{t['onednn']:8.2f}  ({t['kernel'] / t['onednn']:.2f}x)"
                if old is not None:
                    line += f"  before {t['before']:8.2f} ({t['before'] / t['onednn']:.2f}x)"
                print(line, flush=True)


if __name__ == "__main__":
    main()
