"""One scope's index over the token sequences it has seen: what followed a context before.

The idea is SuffixDecoding's (Oliaro et al. 2024, "SuffixDecoding: Extreme Speculative
Decoding for Emerging AI Applications"; Snowflake's Arctic Inference implements it with a
suffix tree): the prompts and outputs of earlier requests predict the next ones, above all
for agents, which send the same tool-call formats, files and plans again and again. Here the
index is an n-gram table instead of a tree: the sequences lie end to end in one token array
(a separator between them), and for each n in `ngram_sizes` the newest occurrences of every
n-gram are listed by where they end. A query takes the newest n committed tokens, longest n
first, reads the listed occurrences (at most `max_occurrences`, newest first), counts how far
back each one agrees with the committed text (as prompt lookup's "longest" match does,
drafters/prompt_lookup.py), and among the occurrences of the longest agreeing context follows
the continuation most of them took, token by token. Each token's frequency is how often it
followed, among the occurrences that took the path so far: the acceptance estimate the copy
rule weighs (policies/source_plan.py).

Work per query is bounded by the occurrences read and the tokens followed, never by the
tokens stored: a few vectorised numpy operations over (max_occurrences, 32) values.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

SEPARATOR = -1  # between sequences in the token array: no context or continuation crosses it
MAX_AGREEMENT = 32  # how far back an occurrence's agreement is counted
# Estimated bytes per stored item (CPython 3.12, 64-bit): a listed occurrence is a list slot
# and an int object; a key is a dict entry, its int key and its list's header.
OCCURRENCE_BYTES = 40
KEY_BYTES = 160
TOKEN_BYTES = 4  # the token array is int32


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
    suffix_cache.SuffixCache holds the lock)."""

    def __init__(self, config: IndexConfig) -> None:
        self.config = config
        self.tokens = np.empty(256, dtype=np.int32)  # (capacity,) the store
        self.size = 0  # tokens used of the store
        self.starts: list[int] = []  # where each sequence starts in the store
        self.table: dict[int, dict[int, list[int]]] = {n: {} for n in config.ngram_sizes}
        self.entries = 0  # occurrences listed, summed over the tables

    def nbytes(self) -> int:
        """The index's memory, estimated from what it stores."""
        keys = sum(len(table) for table in self.table.values())
        return self.tokens.nbytes + OCCURRENCE_BYTES * self.entries + KEY_BYTES * keys

    def add(self, sequence: list[int]) -> None:
        """Stores `sequence` (token ids >= 0) after the others and lists its n-grams."""
        self._reserve(len(sequence) + 1)
        start = self.size
        self.tokens[start : start + len(sequence)] = sequence
        self.tokens[start + len(sequence)] = SEPARATOR
        self.size += len(sequence) + 1
        self.starts.append(start)
        cap = self.config.max_occurrences
        for n, table in self.table.items():
            for end in range(start + n, start + len(sequence) + 1):
                listed = table.setdefault(ngram_key(sequence[end - start - n : end - start]), [])
                listed.append(end)  # the position after the n-gram: its continuation's
                self.entries += 1
                if len(listed) > 2 * cap:  # keep the newest `cap` (amortised)
                    del listed[:-cap]
                    self.entries -= cap + 1

    def _reserve(self, extra: int) -> None:
        if self.size + extra <= self.tokens.size:
            return
        grown = np.empty(max(2 * self.tokens.size, self.size + extra), dtype=np.int32)
        grown[: self.size] = self.tokens[: self.size]
        self.tokens = grown

    def lookup(self, context: list[int], eos: frozenset[int] = frozenset()) -> SuffixMatch | None:
        """The continuation most often taken after the longest stored context agreeing with
        the newest tokens of `context`; None when no indexed n-gram of it was seen with a
        token after it."""
        for n in sorted(self.table, reverse=True):
            if len(context) < n:
                continue
            listed = self.table[n].get(ngram_key(context[-n:]))
            if listed:
                ends = np.asarray(listed[-self.config.max_occurrences :][::-1])  # newest first
                match = self._follow(ends, context, eos)
                if match is not None:
                    return match
        return None

    def _follow(
        self, ends: np.ndarray, context: list[int], eos: frozenset[int]
    ) -> SuffixMatch | None:
        """The continuation after the occurrences ending at `ends` (H,) that agree furthest."""
        ends = ends[self.tokens[ends] != SEPARATOR]  # (H,) those with a token after them
        if not ends.size:
            return None
        agreements = self._agreements(ends, context)  # (H,)
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


def ngram_key(ngram: list[int]) -> int:
    """One exact int for a short run of token ids (each below 2**24): no two runs share one."""
    key = 0
    for token in ngram:
        key = (key << 24) | token
    return key
