"""The suffix cache as a third draft source, beside prompt lookup and the draft model.

Each round the drafter (drafters/hybrid.py, `HybridDrafter` with a scope) offers what every
source could propose (`DraftOptions`): prompt
lookup's match in the request's own text, the suffix cache's continuation of what earlier
texts went on with after the same context (suffix_cache.py, with how often each token
followed), and the draft model's catch-up. The policy chooses the copy source and how far,
and whether the model carries on (policies/source_plan.py; the fixed schedules copy prompt
lookup's match as transformers does, and the suffix cache's only where it has none). A
copied token is a point mass whichever source it comes from, so verification keeps every
output the target's own.
"""

from __future__ import annotations

from dataclasses import replace
from time import perf_counter

import torch

from dynaspec.core.round import DraftOptions
from dynaspec.drafters.suffix_cache import SuffixScope
from dynaspec.drafters.suffix_index import MAX_AGREEMENT


def offer_suffix(
    options: DraftOptions, cache: SuffixScope, tokens: torch.Tensor, eos: frozenset[int]
) -> DraftOptions:
    """`options` with what the cache's scope offers after the committed `tokens` (n,), its
    search time added to the offer's."""
    start = perf_counter()
    match = cache.lookup(tokens[-MAX_AGREEMENT:].tolist(), eos)
    searched = options.search_s + perf_counter() - start
    if match is None:
        return replace(options, search_s=searched)
    return replace(
        options,
        search_s=searched,
        suffix=torch.tensor(match.tokens, dtype=torch.long, device=tokens.device),
        suffix_agreement=match.agreement,
        suffix_frequencies=match.frequencies,
    )
