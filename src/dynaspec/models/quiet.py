"""Quiet loading: no progress bars for work that takes seconds (a cached model's weights).

Progress is shown only for long work (the first conversion of a preset, bench, oracle).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """Turns transformers' progress bars (e.g. "Loading weights") off inside the block and
    back to what they were afterwards."""
    from transformers.utils import logging

    was_enabled = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            logging.enable_progress_bar()
