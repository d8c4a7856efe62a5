"""The bf16 kernel's summation order, bit for bit (issue 66; backends/kernels/bf16.py): each
output is one float32 accumulator that adds its row's column pairs in column order from zero
(per pair VDPBF16PS's two steps: column k+1's product, then column k's, each rounded to
nearest even), the bias after the last pair, one rounding to bf16. A pure-torch float32 replay
of that order is the reference, for 1 to 33 rows and prefill-sized calls, whatever blocks of
rows, columns and tiles the kernel cuts a call into and however many threads share it."""

from __future__ import annotations

import functools

import pytest
import torch

from dynaspec.backends.kernels import bf16

needs_kernel = pytest.mark.skipif(
    not bf16.KERNEL.available(), reason=f"bf16 kernel: {bf16.KERNEL.unavailable_reason()}"
)

ROW_COUNTS = (*range(1, 34), 64, 100, 300)


def replay(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (M, K) bf16 @ weight (N, K) bf16 .T + bias (N,): (M, N) float32, summed in the
    kernel's order (a product of two bf16 values is exact in float32, so each step's one
    rounding is the addition's)."""
    rows, columns = x.float(), weight.float()
    total = torch.zeros(x.shape[0], weight.shape[0])
    for k in range(0, x.shape[1], 2):
        total = total + rows[:, k + 1 : k + 2] * columns[:, k + 1]
        total = total + rows[:, k : k + 1] * columns[:, k]
    return total if bias is None else total + bias


@functools.cache
def _case(rows: int, columns: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, columns, generator=generator).to(torch.bfloat16)
    bias = torch.randn(rows, generator=generator)
    x = torch.randn(max(ROW_COUNTS), columns, generator=generator).to(torch.bfloat16)
    return weight, bias, x, bf16.KERNEL.tiled(weight), replay(x, weight, bias)


@needs_kernel
# 3 tiles (one thread runs 2, the other 1) over one short block of columns (blocks of 2048);
# 2 tiles over a shorter one; a single pair of columns; 5 tiles over a whole block and a short
# one; one tile over two whole blocks and a short one
@pytest.mark.parametrize(
    "rows,columns", [(192, 1536), (128, 300), (64, 2), (320, 2304), (64, 4200)]
)
def test_every_row_count_sums_in_the_one_row_order(rows, columns) -> None:
    _, bias, x, tiled, expected = _case(rows, columns)
    for count in ROW_COUNTS:
        out = bf16.KERNEL.matmul(x[:count], tiled, bias, out_dtype=torch.float32)
        assert torch.equal(out, expected[:count]), count
        rounded = bf16.KERNEL.matmul(x[:count], tiled, bias)
        assert torch.equal(rounded, expected[:count].to(torch.bfloat16)), count


@needs_kernel
@pytest.mark.parametrize("count", [7, 33, 300])
def test_one_thread_and_the_rows_alone_give_the_same_bits(count) -> None:
    weight, _, x, tiled, _ = _case(192, 1536)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = bf16.KERNEL.matmul(x[:count], tiled)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, bf16.KERNEL.matmul(x[:count], tiled))
    assert torch.equal(one, replay(x[:count], weight, None).to(torch.bfloat16))
    singles = torch.cat([bf16.KERNEL.matmul(x[i : i + 1], tiled) for i in range(0, count, 5)])
    assert torch.equal(singles, one[::5])
