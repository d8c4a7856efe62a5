"""The suffix cache's memory and lookup time at its default size (64 MB).

Fills a `dynaspec.SuffixCache()` with 2000-token sequences of Zipf-drawn token ids (a
50,000-token vocabulary) in 8 scopes until its estimate reaches 97% of the budget, then
times 3000 lookups of 32-token contexts, half from stored sequences and half from elsewhere
in the draw. Times are the thread's CPU time (a shared machine's waits left out); then each
lookup's best of 5 more, the cost of the work itself (a loaded machine's tail left out).

    python benchmarks/speed/suffix_lookup.py
"""

from __future__ import annotations

import random
import time

import dynaspec


def main() -> None:
    draw = random.Random(0)
    vocab = 50_000
    base = draw.choices(range(vocab), weights=[1 / (i + 1) for i in range(vocab)], k=400_000)
    cache = dynaspec.SuffixCache()
    stored: list[list[int]] = []
    started = time.thread_time()
    while cache.nbytes() < 0.97 * cache.budget:
        start = draw.randrange(len(base) - 2000)
        stored.append(base[start : start + 2000])
        cache.add(stored[-1], scope=f"k{len(stored) % 8}")
    adding = time.thread_time() - started
    tokens = 2000 * len(stored)
    size = cache.nbytes()
    print(f"{tokens} tokens in {size / 2**20:.1f} MB ({size / tokens:.0f} bytes a token)")
    print(f"adding: {adding / tokens * 1e6:.1f} us a token")
    times, queries = [], []
    for index in range(3000):
        which = len(stored) - 1 - index % 50
        length = draw.randrange(40, 1990)
        source = stored[which] if index % 2 else base[draw.randrange(390_000) :]
        context = source[:length][-32:]
        queries.append((context, f"k{(which + 1) % 8}"))
        started = time.thread_time()
        cache.lookup(context, scope=f"k{(which + 1) % 8}")
        times.append(time.thread_time() - started)
    times.sort()
    median, p90, p99 = (times[int(q * len(times))] * 1e3 for q in (0.5, 0.9, 0.99))
    print(f"lookup ms: median {median:.3f}, p90 {p90:.3f}, p99 {p99:.3f}")
    best = sorted(min(_timed(cache, *query) for _ in range(5)) for query in queries)
    median, p99, most = (best[min(int(q * len(best)), len(best) - 1)] * 1e3 for q in (0.5, 0.99, 1))
    print(f"best of 5 per lookup, ms: median {median:.3f}, p99 {p99:.3f}, max {most:.3f}")


def _timed(cache: dynaspec.SuffixCache, context: list[int], scope: str) -> float:
    """One lookup's thread CPU time."""
    started = time.thread_time()
    cache.lookup(context, scope=scope)
    return time.thread_time() - started


if __name__ == "__main__":
    main()
