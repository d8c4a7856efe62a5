"""The suffix cache as a third draft source, beside prompt lookup and the draft model.

Each round the drafter offers what every source could propose (`DraftOptions`): prompt
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

from dynaspec.core.protocols import Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, Proposal
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters.cross_tokenizer import CrossTokenizerDrafter
from dynaspec.drafters.draft_model import ModelDrafter
from dynaspec.drafters.hybrid import copy_then_model
from dynaspec.drafters.prompt_lookup import PromptLookupDrafter, copy_proposal
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


class SuffixDrafter:
    """Copies from the suffix cache or prompt lookup, then the draft model, as planned."""

    def __init__(
        self,
        cache: SuffixScope,
        vocab_size: int,
        eos_token_ids: tuple[int, ...],
        model: ModelDrafter | CrossTokenizerDrafter | None = None,
        lookup: PromptLookupDrafter | None = None,
    ) -> None:
        self.cache = cache  # the scope read
        self.vocab_size = vocab_size
        self.eos = frozenset(eos_token_ids)
        self.model = model
        self.lookup = lookup

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        for source in (self.model, self.lookup):
            if source is not None:
                source.begin(input_ids, max_length=max_length)

    def offer(self, tokens: torch.Tensor) -> DraftOptions:
        """What prompt lookup, the draft model and the suffix cache could propose."""
        options = self.lookup.offer(tokens) if self.lookup is not None else DraftOptions(None)
        if self.model is not None:
            model = self.model.offer(tokens)
            checks = isinstance(self.model, ModelDrafter)  # it takes a guess
            options = replace(options, catchup=model.catchup, started=model.started, checks=checks)
        return offer_suffix(options, self.cache, tokens, self.eos)

    def propose(
        self,
        tokens: torch.Tensor,
        options: DraftOptions,
        plan: DraftPlan,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        offer = options.chosen(plan.source)  # `copy` is the planned source's
        if self.model is None:
            return copy_proposal(offer, plan.copy, sampler, self.vocab_size)
        return copy_then_model(
            self.model, self.vocab_size, tokens, offer, plan, stopper, sampler, eos_token_ids
        )

    def crop(self, num_committed: int) -> None:
        if self.model is not None:
            self.model.crop(num_committed)
