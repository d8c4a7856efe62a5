"""Adapters shared between threads: one `generate` call at a time per adapter; and what a
call hands back is the caller's own (tensors outside inference mode).

A model adapter holds the cache of the sequence it is decoding (a position counter, a
preallocated static cache, a transformers cache), so two calls that decode with the same
adapter at once would write into each other's cache. Each call therefore holds the lock of
every adapter it uses for its whole length (`holding`), and a second thread's call with the
same adapter waits for the first to finish. The locks of one call are taken in one fixed
order (by `id`), so that a call with (a, b) and another with (b, a) cannot deadlock.

A transformers model passed to `generate` is wrapped in a fresh adapter per call, so threads
that share the model itself run in parallel; only adapter objects (a `StaticAdapter`, an
int8/int4 or compiled model from `load_pair(..., static=True)`, an `HFAdapter` made by the
caller, any object implementing `ModelAdapter`) are serialised.

The same adapter object as target and draft is one cache for two sequences: it decodes
through a second adapter over the same weights (`fork()`, which dynaspec's adapters have),
or is refused up front.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import torch

from dynaspec.core.protocols import ModelAdapter
from dynaspec.errors import ConfigError, IncompatibleModelsError


class CallLock:
    """A lock held for one generate call; a second acquire from the thread that holds it is
    an error (a streamer or stopping criterion that calls generate with the same adapter
    would otherwise wait for itself forever)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def acquire(self, name: str) -> None:
        if self._owner == threading.get_ident():
            raise ConfigError(
                f"generate() was called with the adapter {name} from inside another "
                "generate() call that is decoding with it (a streamer, logits processor or "
                "stopping criterion calling generate?): one adapter decodes one sequence at "
                "a time; give the inner call its own adapter"
            )
        self._lock.acquire()
        self._owner = threading.get_ident()

    def release(self) -> None:
        self._owner = None
        self._lock.release()


_locks: weakref.WeakKeyDictionary[Any, CallLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()  # two threads asking for a new adapter's lock get the same one


def call_lock(adapter: Any) -> CallLock | None:
    """The lock of `adapter` (made on first use); None for an object that cannot carry one
    (not weakly referenceable), which is then not serialised."""
    with _locks_guard:
        try:
            lock = _locks.get(adapter)
            if lock is None:
                lock = _locks[adapter] = CallLock()
        except TypeError:
            return None
    return lock


def _name(model: Any) -> str:
    return f"{type(model).__name__} at {id(model):#x}"


@contextmanager
def holding(*models: Any) -> Iterator[None]:
    """Holds the call lock of each adapter among `models` (None and transformers models are
    skipped: they get a fresh adapter per call) until the block ends, taken in `id` order."""
    adapters = {id(m): m for m in models if m is not None and isinstance(m, ModelAdapter)}
    held: list[CallLock] = []
    try:
        for key in sorted(adapters):
            lock = call_lock(adapters[key])
            if lock is not None:
                lock.acquire(_name(adapters[key]))
                held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()


def separate_draft(target: ModelAdapter, draft: ModelAdapter | None) -> ModelAdapter | None:
    """The draft adapter to decode with: `draft` itself, or, when it is the very target
    object, a second adapter over the same weights with its own cache (`fork()`)."""
    if draft is None or draft is not target:
        return draft
    fork = getattr(target, "fork", None)
    if fork is None:
        raise IncompatibleModelsError(
            f"the same {type(target).__name__} object was passed as target and draft, but it "
            "has one cache and no fork(): pass a second adapter over the draft weights as "
            "draft, or draft=None to decode with the target alone"
        )
    return fork()


def outside_inference_mode(output: Any) -> Any:
    """`output` with its tensors cloned outside inference mode, so that the caller can edit
    them in place or use them in a forward that is backpropagated, as with transformers'
    `generate` output (which runs under no_grad, not inference_mode)."""

    def normal(rows: tuple[torch.Tensor, ...] | None) -> tuple[torch.Tensor, ...] | None:
        return None if rows is None else tuple(row.clone() for row in rows)

    return replace(
        output,
        sequences=output.sequences.clone(),
        scores=normal(output.scores),
        logits=normal(output.logits),
    )
