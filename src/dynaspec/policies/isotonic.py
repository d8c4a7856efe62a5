"""Weighted isotonic regression by pool-adjacent-violators, shared by the two acceptance
estimates (the draft model's calibration and the copied tokens' acceptance)."""

from __future__ import annotations

from collections.abc import Sequence


def pool_adjacent_violators(sums: Sequence[float], weights: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to the means `sums[i] / weights[i]` in weighted
    least squares: neighbours out of order are pooled (their sums and weights added)."""
    blocks: list[list[float]] = []  # [sum, weight, entries]
    for total, weight in zip(sums, weights, strict=True):
        blocks.append([total, weight, 1])
        while len(blocks) > 1 and _mean(blocks[-2]) > _mean(blocks[-1]):
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
    return [_mean(block) for block in blocks for _ in range(int(block[2]))]


def _mean(block: list[float]) -> float:
    return block[0] / block[1]
