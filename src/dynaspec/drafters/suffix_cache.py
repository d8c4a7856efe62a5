"""`dynaspec.SuffixCache`: drafts from what a process has seen, shared across calls.

The prompts and outputs of earlier calls, grouped by a scope key (a session, a user, an API
key: the server's default), each scope indexed on its own (suffix_index.py). Bounded
memory: its size is estimated from what it stores, and when an addition takes it past
`size_mb` the least recently used scopes go first (used: added to or looked up); a scope that
alone holds more than the budget keeps its newest sequences. Thread-safe: one lock around
each addition and lookup, so the server's engine thread and its request threads may share it.

Outputs only make drafts and verification keeps every output the target's own; but how fast
a draft makes a reply tells its reader what was stored before it, so whoever shares a scope
shares that (docs/serve.md, "The suffix cache").
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dynaspec.drafters.suffix_index import MAX_AGREEMENT, IndexConfig, ScopeIndex, SuffixMatch
from dynaspec.errors import ConfigError

DEFAULT_SCOPE = "default"
MAX_TOKEN_ID = 2**31  # the store is int32
DEFAULT_SIZE_MB = 64.0  # the default budget (generate, serve, loadtest)


class SuffixCache:
    """An index over the token sequences seen, by scope, in at most `size_mb` MB (estimated).

    `generate(..., suffix_cache=cache)` drafts from it and adds each call's prompt and
    output after the call; `add` and `lookup` are also public."""

    def __init__(
        self,
        size_mb: float = DEFAULT_SIZE_MB,
        max_tokens: int = 16,
        ngram_sizes: Sequence[int] = (2, 4, 8),
        max_occurrences: int = 32,
    ) -> None:
        if isinstance(size_mb, bool) or not isinstance(size_mb, int | float) or size_mb <= 0:
            raise ConfigError(f"SuffixCache size_mb must be a number > 0, got {size_mb!r}")
        sizes = tuple(ngram_sizes)
        if not sizes or any(isinstance(n, bool) or not isinstance(n, int) for n in sizes):
            raise ConfigError(f"ngram_sizes must be ints from 1 to 8, got {ngram_sizes!r}")
        if min(sizes) < 1 or max(sizes) > 8:
            raise ConfigError(f"ngram_sizes must be ints from 1 to 8, got {ngram_sizes!r}")
        for name, value in (("max_tokens", max_tokens), ("max_occurrences", max_occurrences)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"SuffixCache {name} must be an int >= 1, got {value!r}")
        self.budget = int(size_mb * 2**20)  # bytes
        self.config = IndexConfig(tuple(sorted(set(sizes))), max_occurrences, max_tokens)
        self._scopes: OrderedDict[str, ScopeIndex] = OrderedDict()  # least recent first
        self._lock = threading.Lock()

    @property
    def size_mb(self) -> float:
        return self.budget / 2**20

    def add(self, tokens: Iterable[int], scope: str = DEFAULT_SCOPE) -> None:
        """Stores one sequence (a prompt and its output) under `scope`."""
        sequence = [int(token) for token in tokens]
        if any(token < 0 or token >= MAX_TOKEN_ID for token in sequence):
            raise ConfigError(f"SuffixCache stores token ids from 0 to {MAX_TOKEN_ID - 1}")
        if len(sequence) < 2:
            return
        with self._lock:
            index = self._scopes.get(scope)
            if index is None:
                index = self._scopes[scope] = ScopeIndex(self.config)
            self._scopes.move_to_end(scope)
            index.add(sequence)
            self._evict()

    def lookup(
        self, context: Sequence[int], scope: str = DEFAULT_SCOPE, eos: Iterable[int] = ()
    ) -> SuffixMatch | None:
        """What most often followed the longest stored context agreeing with the newest
        tokens of `context` under `scope` (cut before any `eos` token); None: nothing."""
        tail = [int(token) for token in context[-MAX_AGREEMENT:]]  # all a query reads
        with self._lock:
            index = self._scopes.get(scope)
            if index is None:
                return None
            self._scopes.move_to_end(scope)
            return index.lookup(tail, frozenset(int(token) for token in eos))

    def scope(self, key: str) -> SuffixScope:
        """One scope of the cache, as `generate(..., suffix_cache=...)` takes it."""
        return SuffixScope(self, key)

    def nbytes(self) -> int:
        """The memory the stored sequences and their index take, estimated."""
        with self._lock:
            return sum(index.nbytes() for index in self._scopes.values())

    def scopes(self) -> list[str]:
        """The scopes held, least recently used first."""
        with self._lock:
            return list(self._scopes)

    def clear(self, scope: str | None = None) -> None:
        """Forgets one scope, or everything."""
        with self._lock:
            if scope is None:
                self._scopes.clear()
            else:
                self._scopes.pop(scope, None)

    def _evict(self) -> None:
        """Least recently used scopes first, until the estimate fits; the newest scope, if it
        alone is too big, keeps its newest sequences in half the budget."""
        total = sum(index.nbytes() for index in self._scopes.values())
        while total > self.budget and len(self._scopes) > 1:
            _, dropped = self._scopes.popitem(last=False)
            total -= dropped.nbytes()
        if total > self.budget and self._scopes:
            next(reversed(self._scopes.values())).drop_oldest(self.budget // 2)


@dataclass(frozen=True)
class SuffixScope:
    """One scope of a SuffixCache: what a call reads and adds to."""

    cache: SuffixCache
    key: str = DEFAULT_SCOPE

    def add(self, tokens: Iterable[int]) -> None:
        self.cache.add(tokens, self.key)

    def lookup(self, context: Sequence[int], eos: Iterable[int] = ()) -> SuffixMatch | None:
        return self.cache.lookup(context, self.key, eos)


def as_scope(cache: SuffixCache | SuffixScope | None) -> SuffixScope | None:
    """A cache as its default scope; a scope as it is."""
    if cache is None or isinstance(cache, SuffixScope):
        return cache
    if isinstance(cache, SuffixCache):
        return cache.scope(DEFAULT_SCOPE)
    raise ConfigError(
        f"suffix_cache must be a dynaspec.SuffixCache (or cache.scope(key)), got "
        f"{type(cache).__name__}: make one with dynaspec.SuffixCache(size_mb=64)"
    )
