"""One scope's index over the token sequences it has seen: what followed a context before.

The idea is SuffixDecoding's (Oliaro et al. 2024, "SuffixDecoding: Extreme Speculative
Decoding for Emerging AI Applications"; Snowflake's Arctic Inference implements it with a
suffix tree): the prompts and outputs of earlier requests predict the next ones, above all
for agents, which send the same tool-call formats, files and plans again and again. Here the
index is a table of hashed n-grams instead of a tree: the sequences lie end to end in one
token array (a separator between them), and for each n in `ngram_sizes` every n-gram's hash
and the position after it are kept in sorted runs (`ScopeIndex`). A query takes the newest n
committed tokens, longest n first, reads their newest occurrences (at most
`max_occurrences`), counts how far
back each one agrees with the committed text (as prompt lookup's "longest" match does,
drafters/prompt_lookup.py), and among the occurrences of the longest agreeing context follows
the continuation most of them took, token by token. Each token's frequency is how often it
followed, among the occurrences that took the path so far: the acceptance estimate the copy
rule weighs (policies/source_plan.py).

Work per query is a binary search per run (O(log N) runs) and a few vectorised numpy
operations over (max_occurrences, 32) values: bounded by the occurrences read and the tokens
followed, not by the tokens stored beyond that logarithm.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

SEPARATOR = -1  # between sequences in the token array: no context or continuation crosses it
MAX_AGREEMENT = 32  # how far back an occurrence's agreement is counted
HASH_MULTIPLIER = 0x9E3779B97F4A7C15  # an odd 64-bit multiplier (the golden ratio's)
HASH_BASE = np.uint64(HASH_MULTIPLIER)
HASH_MASK = 2**64 - 1


@dataclass(frozen=True)
class IndexConfig:
    """What a scope's index keeps and how far a query looks."""

    ngram_sizes: tuple[int, ...] = (2, 4, 8)  # contexts indexed (a query tries the longest)
    max_occurrences: int = 32  # newest occurrences of a context read per query (and kept)
    max_tokens: int = 16  # longest continuation a query returns


@dataclass(frozen=True)
class SuffixMatch:
    """A continuation the index offers after the committed tokens, and how often it followed."""

    tokens: tuple[int, ...]  # the continuation, cut before a sequence end or an EOS token
    frequencies: tuple[float, ...]  # token j followed in this share of the occurrences that
    #                                 had followed tokens 0 .. j-1 (1.0: every one did)
    agreement: int  # committed tokens its context agrees on, back from the newest (capped)
    occurrences: int  # occurrences of that context the continuation was followed over
    examined: int  # occurrences the query read (at most IndexConfig.max_occurrences)


class ScopeIndex:
    """The sequences of one scope end to end, and their n-gram occurrences (not thread-safe:
    suffix_cache.SuffixCache holds the lock).

    Per n, the occurrences are (hash of the n-gram, position after it) pairs in sorted runs,
    a log-structured merge: each added sequence makes a run, and the newest runs are merged
    while the one before is less than twice as long, so there are O(log N) runs and each
    pair is merged O(log N) times. A query binary-searches each run, newest first. Memory:
    16 bytes per pair and 4 per token, a few numpy arrays (no Python object per token)."""

    def __init__(self, config: IndexConfig) -> None:
        self.config = config
        self.tokens = np.empty(256, dtype=np.int32)  # (capacity,) the store
        self.size = 0  # tokens used of the store
        self.starts: list[int] = []  # where each sequence starts in the store
        # per n: runs of (hashes (R,) uint64 sorted, ends (R,) int64), oldest first
        self.runs: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {
            n: [] for n in config.ngram_sizes
        }

    def nbytes(self) -> int:
        """The index's memory: its arrays' bytes."""
        runs = sum(h.nbytes + e.nbytes for runs in self.runs.values() for h, e in runs)
        return self.tokens.nbytes + runs

    def add(self, sequence: list[int]) -> None:
        """Stores `sequence` (token ids >= 0) after the others and indexes its n-grams that
        have a token after them."""
        self._reserve(len(sequence) + 1)
        start = self.size
        self.tokens[start : start + len(sequence)] = sequence
        self.tokens[start + len(sequence)] = SEPARATOR
        self.size += len(sequence) + 1
        self.starts.append(start)
        stored = self.tokens[start : start + len(sequence)]
        for n, runs in self.runs.items():
            if len(sequence) <= n:
                continue
            hashes = ngram_hashes(stored[:-1], n)  # (L - n,) the n-grams before a token
            ends = np.arange(start + n, start + len(sequence), dtype=np.int64)  # (L - n,)
            order = np.argsort(hashes, kind="stable")  # ends stay ascending within a hash
            runs.append((hashes[order], ends[order]))
            while len(runs) > 1 and runs[-2][0].size < 2 * runs[-1][0].size:
                newer = runs.pop()
                older = runs.pop()
                hashes = np.concatenate([older[0], newer[0]])
                merged = np.argsort(hashes, kind="stable")  # older ends first on a tie
                runs.append((hashes[merged], np.concatenate([older[1], newer[1]])[merged]))

    def drop_oldest(self, budget: int) -> None:
        """Drops the oldest sequences until the estimate fits `budget` bytes (all of them if
        even the newest does not): the runs keep their pairs after the cut, still sorted,
        and the store its tokens, moved to the front; nothing is hashed again."""
        while self.starts and self.nbytes() > budget:
            per_token = self.nbytes() / max(self.size, 1)
            room = budget / per_token  # tokens that fit, at today's bytes per token
            keep = next(
                (i for i, start in enumerate(self.starts) if self.size - start <= room),
                len(self.starts),
            )
            self._cut(max(keep, 1))

    def _cut(self, first: int) -> None:
        """Forgets the sequences before the `first`-th."""
        cut = self.starts[first] if first < len(self.starts) else self.size
        kept = self.size - cut
        tokens = np.empty(max(256, kept + kept // 4), dtype=np.int32)
        tokens[:kept] = self.tokens[cut : self.size]
        self.tokens, self.size = tokens, kept
        self.starts = [start - cut for start in self.starts[first:]]
        for n, runs in self.runs.items():
            kept_runs = []
            for hashes, ends in runs:
                alive = ends >= cut + n  # (R,) an n-gram wholly after the cut
                if alive.any():
                    kept_runs.append((hashes[alive], ends[alive] - cut))
            self.runs[n] = kept_runs

    def _reserve(self, extra: int) -> None:
        if self.size + extra <= self.tokens.size:
            return
        grown = np.empty(max(2 * self.tokens.size, self.size + extra), dtype=np.int32)
        grown[: self.size] = self.tokens[: self.size]
        self.tokens = grown

    def _occurrences(self, n: int, context: list[int]) -> np.ndarray:
        """(H,) the positions after the newest (at most max_occurrences) occurrences of the
        newest n tokens of `context`, newest first (a hash's collisions included: the
        agreement weeds them out)."""
        key = np.uint64(ngram_hash(context[-n:]))
        wanted = self.config.max_occurrences
        found: list[np.ndarray] = []
        for hashes, ends in reversed(self.runs[n]):  # newest run first
            high = int(hashes.searchsorted(key, side="right"))
            low = max(int(hashes.searchsorted(key, side="left")), high - wanted)
            if high > low:
                found.append(ends[low:high][::-1])  # newest first
                wanted -= high - low
                if wanted <= 0:
                    break
        return np.concatenate(found) if found else np.empty(0, dtype=np.int64)

    def lookup(self, context: list[int], eos: frozenset[int] = frozenset()) -> SuffixMatch | None:
        """The continuation most often taken after the longest stored context agreeing with
        the newest tokens of `context`; None when no indexed n-gram of it was seen with a
        token after it."""
        for n in sorted(self.runs, reverse=True):
            if len(context) < n:
                continue
            ends = self._occurrences(n, context)
            if ends.size:
                match = self._follow(ends, context, eos, n)
                if match is not None:
                    return match
        return None

    def _follow(
        self, ends: np.ndarray, context: list[int], eos: frozenset[int], n: int
    ) -> SuffixMatch | None:
        """The continuation after the occurrences ending at `ends` (H,) that agree furthest
        (on at least the `n` tokens looked up: fewer is a hash collision)."""
        agreements = self._agreements(ends, context)  # (H,)
        genuine = agreements >= min(n, MAX_AGREEMENT)
        ends, agreements = ends[genuine], agreements[genuine]
        if not ends.size:
            return None
        best = int(agreements.max())
        rows = ends[agreements == best]  # (H',) the occurrences of the longest context
        ahead = rows[:, None] + np.arange(self.config.max_tokens)  # (H', L)
        following = self.tokens[np.minimum(ahead, self.size - 1)]  # (H', L)
        following[ahead >= self.size] = SEPARATOR
        tokens, frequencies = _majority_path(following, eos)
        if not tokens:
            return None
        return SuffixMatch(tokens, frequencies, best, int(rows.size), int(ends.size))

    def _agreements(self, ends: np.ndarray, context: list[int]) -> np.ndarray:
        """(H,) how many tokens before each occurrence's end agree with the newest tokens of
        `context`, counted back, at most MAX_AGREEMENT (a separator ends the count)."""
        newest = np.full(MAX_AGREEMENT, -2, dtype=np.int64)  # (A,) -2 matches nothing
        tail = context[-MAX_AGREEMENT:][::-1]
        newest[: len(tail)] = tail
        before = ends[:, None] - 1 - np.arange(MAX_AGREEMENT)  # (H, A)
        same = (self.tokens[np.maximum(before, 0)] == newest) & (before >= 0)  # (H, A)
        return same.cumprod(1).sum(1)


def _majority_path(
    following: np.ndarray, eos: frozenset[int]
) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Over `following` (H, L), token by token, the token most of the rows still on the path
    took next (ties: the newest row's, the first), and the share of them that took it; ends
    at a separator or EOS. Where all rows left agree, a run is taken at once."""
    tokens: list[int] = []
    frequencies: list[float] = []
    column, width = 0, following.shape[1]
    while column < width:
        rows = following[:, column:]  # (H', L - column)
        agreed = (rows == rows[0]).all(0)  # (L - column,)
        run = width - column if agreed.all() else int(agreed.argmin())
        for token in rows[0, :run].tolist():
            if token == SEPARATOR or token in eos:
                return tuple(tokens), tuple(frequencies)
            tokens.append(token)
            frequencies.append(1.0)
        column += run
        if column == width:
            break
        values = following[:, column].tolist()
        token, count = Counter(values).most_common(1)[0]  # the first seen of the most common
        if token == SEPARATOR or token in eos:
            break
        tokens.append(token)
        frequencies.append(count / len(values))
        following = following[following[:, column] == token]
        column += 1
    return tuple(tokens), tuple(frequencies)


def ngram_hash(ngram: list[int]) -> int:
    """`ngram_hashes` of one run of tokens, in Python ints (a query's: no array to make)."""
    key = 0
    for token in ngram:
        key = (key * HASH_MULTIPLIER + token + 1) & HASH_MASK
    return key


def ngram_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """(L - n + 1,) uint64 a polynomial hash of each run of n tokens of `tokens` (L,)
    (wrapping arithmetic)."""
    values = tokens.astype(np.uint64) + np.uint64(1)  # (L,) so that token 0 counts too
    count = values.size - n + 1
    hashes = np.zeros(count, dtype=np.uint64)
    for offset in range(n):
        hashes = hashes * HASH_BASE + values[offset : offset + count]
    return hashes
