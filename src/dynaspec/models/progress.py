"""What the model loaders say while they work: one line before a step, a line that ticks
through a step with no progress of its own, the label of a fast copy's bar."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from dynaspec.models.quiet import no_progress_bars


def say(line: str) -> None:
    """One line for the user, on stderr."""
    print(line, file=sys.stderr, flush=True)


@contextmanager
def ticking(label: str, *, enabled: bool = True) -> Iterator[None]:
    """A line on stderr that counts the seconds of a step with no progress of its own
    (transformers reading a whole GGUF: half a minute or more), refreshed every second;
    transformers' own bars are held back meanwhile (those its switch governs, and its GGUF
    reader's, which that switch does not), so that they do not interleave with it."""
    if not enabled:
        yield
        return
    line = tqdm(desc=label, bar_format="{desc}: {elapsed}", file=sys.stderr)
    stop = threading.Event()
    ticker = threading.Thread(target=lambda: _tick(line, stop), daemon=True)
    ticker.start()
    try:
        with no_progress_bars(), _gguf_bar_held_back():
            yield
    finally:
        stop.set()
        ticker.join()
        line.close()


GGUF_READER = "transformers.modeling_gguf_pytorch_utils"  # a tqdm of its own, always shown


@contextmanager
def _gguf_bar_held_back() -> Iterator[None]:
    """transformers' GGUF reader with its tqdm disabled, restored afterwards (nothing to
    hold back where the module does not import)."""
    try:
        module = importlib.import_module(GGUF_READER)
    except ImportError:
        yield
        return
    original = module.tqdm
    module.tqdm = partial(original, disable=True)
    try:
        yield
    finally:
        module.tqdm = original


def _tick(line: tqdm, stop: threading.Event, every: float = 1.0) -> None:
    """Redraws `line` (its elapsed time) every `every` seconds until `stop` is set."""
    while not stop.wait(every):
        line.refresh()


def fast_copy_label(name: Any) -> str:
    """The progress bar's label while a model's fast copy is built."""
    return f"{Path(str(name)).name}: fast copy of the weights"
