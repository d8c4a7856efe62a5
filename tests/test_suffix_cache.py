"""dynaspec.SuffixCache: what followed a context before, bounded, by scope, thread-safe."""

from __future__ import annotations

import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dynaspec.drafters.suffix_cache import SuffixCache
from dynaspec.drafters.suffix_index import MAX_AGREEMENT
from dynaspec.errors import ConfigError

SEQUENCES = st.lists(st.lists(st.integers(0, 5), min_size=2, max_size=40), min_size=1, max_size=6)
CONTEXT = st.lists(st.integers(0, 5), min_size=1, max_size=40)


def _runs(sequence: list[int], length: int) -> set[tuple[int, ...]]:
    return {tuple(sequence[i : i + length]) for i in range(len(sequence) - length + 1)}


def _back_agreement(sequence: list[int], end: int, context: list[int]) -> int:
    count = 0
    while count < MAX_AGREEMENT and count < end and count < len(context):
        if sequence[end - 1 - count] != context[-1 - count]:
            break
        count += 1
    return count


@settings(max_examples=150, deadline=None)
@given(SEQUENCES, CONTEXT)
def test_a_match_is_what_followed_the_longest_agreeing_context(sequences, context):
    cache = SuffixCache(max_occurrences=1000, ngram_sizes=(1, 2, 4))
    for sequence in sequences:
        cache.add(sequence)
    match = cache.lookup(context)
    # brute force: the longest indexed n whose newest n-gram has a token after it somewhere
    ends = []
    for n in (4, 2, 1):
        if len(context) < n:
            continue
        ends = [
            (sequence, end)
            for sequence in sequences
            for end in range(n, len(sequence))
            if sequence[end - n : end] == context[-n:]
        ]
        if ends:
            break
    if not ends:
        assert match is None
        return
    assert match is not None
    assert match.agreement == max(_back_agreement(s, end, context) for s, end in ends)
    # the context it agreed on, then its continuation, lies in one stored sequence
    run = tuple(context[len(context) - match.agreement :]) + match.tokens[:1]
    assert any(run in _runs(sequence, len(run)) for sequence in sequences)
    assert all(0.0 < f <= 1.0 for f in match.frequencies)
    assert len(match.tokens) == len(match.frequencies) <= cache.config.max_tokens
    assert match.examined <= cache.config.max_occurrences


def test_frequencies_count_the_continuations_that_followed():
    cache = SuffixCache()
    for tail in ([7, 8], [7, 8], [7, 9], [6, 1]):
        cache.add([1, 2, 3, 4, *tail])
    match = cache.lookup([0, 2, 3, 4])
    assert match is not None and match.agreement == 3
    assert match.tokens == (7, 8)
    assert match.frequencies == pytest.approx((0.75, 2 / 3))
    assert match.occurrences == 4


def test_a_continuation_stops_before_eos_and_at_the_sequence_end():
    cache = SuffixCache()
    cache.add([1, 2, 3, 4, 5, 0, 6])
    assert cache.lookup([1, 2], eos=[0]).tokens == (3, 4, 5)
    assert cache.lookup([4, 5, 0]).tokens == (6,)
    assert cache.lookup([5, 0, 6]) is None  # nothing followed


def test_scopes_are_apart():
    cache = SuffixCache()
    cache.add([1, 2, 3, 4], scope="alice")
    assert cache.lookup([1, 2], scope="bob") is None
    assert cache.lookup([1, 2], scope="alice").tokens == (3, 4)


def test_the_least_recently_used_scope_goes_first():
    sequence = list(range(1000, 1300))
    probe = SuffixCache()
    probe.add(sequence)
    cache = SuffixCache(size_mb=3.5 * probe.nbytes() / 2**20)  # room for 3 such scopes
    for scope in ("a", "b", "c"):
        cache.add(sequence, scope=scope)
    assert cache.scopes() == ["a", "b", "c"]
    cache.lookup(sequence[:5], scope="a")  # a is used: b is now the oldest
    for n in range(6):
        cache.add([n, *sequence], scope=f"new{n}")
    assert "b" not in cache.scopes()
    assert cache.nbytes() <= cache.budget


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(2, 3000)), min_size=1, max_size=12))
def test_the_estimate_stays_within_the_budget(additions):
    cache = SuffixCache(size_mb=0.1)
    for scope, length in additions:
        cache.add([(scope * 7919 + i * 31) % 50000 for i in range(length)], scope=str(scope))
        assert cache.nbytes() <= cache.budget


def test_a_scope_larger_than_the_budget_keeps_its_newest_sequences():
    probe = SuffixCache()
    for n in range(10):
        probe.add([n + 5000, *range(100, 300)])
    cache = SuffixCache(size_mb=probe.nbytes() / 2**20)  # room for about 10 of 40
    for n in range(40):
        cache.add([n + 5000, *range(100, 300)])
    assert cache.nbytes() <= cache.budget
    match = cache.lookup([39 + 5000, 100])
    assert match is not None and match.tokens[0] == 101 and match.agreement == 2
    assert cache.lookup([0 + 5000, 100]) is None  # the oldest is gone


def test_a_query_reads_a_bounded_number_of_occurrences():
    """The work per query hardly grows with the tokens stored: a context seen 20,000 times
    is read at its newest max_occurrences, from O(log N) sorted runs."""
    cache = SuffixCache(size_mb=256, max_occurrences=16)
    for _ in range(200):
        cache.add([1, 2, 3] * 100)
    match = cache.lookup([5, 1, 2])
    assert match.examined == 16 and match.tokens[:3] == (3, 1, 2)
    (index,) = cache._scopes.values()
    assert all(len(runs) <= 2 + math.log2(index.size) for runs in index.runs.values())


def test_threads_share_one_cache():
    cache = SuffixCache(size_mb=1)
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for n in range(200):
                cache.add([offset, n % 50, 1, 2, 3, n], scope=str(n % 5))
                cache.lookup([offset, n % 50, 1], scope=str((n + 1) % 5))
        except BaseException as error:  # noqa: BLE001 (collected for the assertion)
            errors.append(error)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert cache.lookup([3, 7, 1], scope="2").tokens[:2] == (2, 3)


@pytest.mark.parametrize(
    "kwargs", [{"size_mb": 0}, {"size_mb": True}, {"max_tokens": 0}, {"ngram_sizes": (0,)}]
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ConfigError):
        SuffixCache(**kwargs)


def test_bad_token_ids_are_refused():
    with pytest.raises(ConfigError, match="token ids"):
        SuffixCache().add([1, -3, 2])


def test_memory_per_token_is_a_few_arrays_bytes() -> None:
    """16 bytes per indexed n-gram (3 sizes) and 4 per token, the store at most doubled."""
    cache = SuffixCache()
    for n in range(50):
        cache.add([(n * 7919 + i * 104729) % 150000 for i in range(2000)])
    assert cache.nbytes() <= 60 * 50 * 2001


def test_generate_refuses_what_is_not_a_cache() -> None:
    from dynaspec.drafters.suffix_cache import as_scope

    with pytest.raises(ConfigError, match="dynaspec.SuffixCache"):
        as_scope({"size_mb": 64})  # type: ignore[arg-type]
    cache = SuffixCache()
    assert as_scope(cache).key == "default" and as_scope(cache.scope("a")).key == "a"


@settings(max_examples=60, deadline=None)
@given(SEQUENCES, st.integers(0, 5), st.lists(CONTEXT, min_size=1, max_size=5))
def test_dropping_the_oldest_answers_as_an_index_of_the_rest(sequences, first, contexts):
    """Cutting the oldest sequences out of the runs gives the answers an index built from
    the newer ones alone gives."""
    from dynaspec.drafters.suffix_index import IndexConfig, ScopeIndex

    config = IndexConfig((1, 2, 4), 1000, 16)
    cut, fresh = ScopeIndex(config), ScopeIndex(config)
    for sequence in sequences:
        cut.add(sequence)
    for sequence in sequences[first:]:
        fresh.add(sequence)
    cut._cut(min(first, len(sequences)))
    for context in contexts:
        assert cut.lookup(context) == fresh.lookup(context)
