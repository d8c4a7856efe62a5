"""Checked argument types for the command line (generate, bench, oracle).

Each type checks one value as argparse reads it, so a bad value stops the command with
argparse's usage message and exit code 2 before any model loads, and the message names
the flag (argparse prefixes "argument --threads: ") and the fix in the CLI's words.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from dynaspec.models.dtype import DEFAULT_DTYPE, DTYPE_CHOICES
from dynaspec.models.presets import pair_presets

TINY_PAIR = "tiny"  # built-in random models (dynaspec.models.tiny): nothing to download


def int_at_least(minimum: int, hint: str = "") -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`; `hint` says what to do instead."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            fix = f"; {hint}" if hint else ""
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}{fix}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def float_in(
    low: float, high: float, *, low_open: bool = False, hint: str = ""
) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] ((low, high] with `low_open`)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    if math.isinf(high):
        interval = f"{'>' if low_open else '>='} {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        above_low = value > low if low_open else value >= low
        if not (math.isfinite(value) and above_low and value <= high):
            fix = f"; {hint}" if hint else ""
            raise argparse.ArgumentTypeError(f"must be {_words(interval)}, got {text}{fix}")
        return value

    parse.__name__ = f"number {_words(interval)}"
    return parse


def _words(interval: str) -> str:
    """ "[0, 1]" -> "in [0, 1]"; "> 0" stays."""
    return interval if interval.startswith((">", "<")) else f"in {interval}"


def pair_name(text: str) -> str:
    """An argparse type: a pair preset name (any case) or "tiny"."""
    name = text.strip().lower()
    known = [*pair_presets(), TINY_PAIR]
    if name not in known:
        raise argparse.ArgumentTypeError(
            f"unknown pair {text!r}: choose one of {', '.join(known)} ({TINY_PAIR}: built-in "
            "random models, nothing to download)"
        )
    return name


def add_dtype_and_threads(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    float32_case: str,
    threads: str = "",
) -> None:
    """--dtype and --threads, the same for generate, bench and oracle. `float32_case` names
    what loads in float32 regardless (the tiny pair, --smoke); `threads` adds to the default."""
    parser.add_argument(
        "--dtype",
        default=None,
        choices=DTYPE_CHOICES,
        help=f"weights dtype (default: {DEFAULT_DTYPE}: bfloat16 where the CPU multiplies bf16 "
        f"natively (AVX512-BF16 or AMX), else float32; {float32_case}: float32). auto: the "
        "checkpoint's own dtype",
    )
    parser.add_argument(
        "--threads",
        type=int_at_least(1, "omit --threads to use every core"),
        default=None,
        help=f"torch threads (default: all cores{threads})",
    )
