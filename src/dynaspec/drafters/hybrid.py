"""A draft model and prompt lookup (or the suffix cache, drafters/suffix.py) together: copy
what a match offers, then let the model carry on where the copy ends, or let it stand aside.

Before a round the policy sees what the sources offer (the lookup continuation and its
agreement, the model's catch-up; `DraftOptions`, made by `offer_sources` alone) and fixes a
`DraftPlan`: m copied tokens first, then at most some model tokens. Everything it sees is a
function of the committed tokens, never of tokens drafted in the same round, so the choice
of source cannot bias sampling. When the model carries on, the m copied tokens are fed to it
in its first forward (with any committed tokens it missed), and it drafts after them as
usual; its cache then holds the copied tokens too, and the loop's crop removes the rejected
ones. The model is a draft of the target's vocabulary (`ModelDrafter`) or of another
tokenizer (`CrossTokenizerDrafter`, `IntersectionDrafter`: the copied tokens reach it as
text). A draft of the target's vocabulary may also check a copy instead: the continuation is
its guess, and it drafts through it without stopping as far as it agrees
(`DraftPlan.checked`).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from dynaspec.core.protocols import Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, Proposal
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters.cross_tokenizer import CrossTokenizerDrafter
from dynaspec.drafters.draft_model import ModelDrafter
from dynaspec.drafters.prompt_lookup import PromptLookupDrafter, copy_proposal
from dynaspec.drafters.suffix import offer_suffix
from dynaspec.drafters.suffix_cache import SuffixScope
from dynaspec.errors import ConfigError


class HybridDrafter:
    """Copies from prompt lookup or the suffix cache (`suffix`, a scope), then the draft
    model, as the round's plan says; any of the three may be absent."""

    def __init__(
        self,
        model: ModelDrafter | CrossTokenizerDrafter | None,
        lookup: PromptLookupDrafter | None,
        suffix: SuffixScope | None = None,
        vocab_size: int | None = None,  # None: the lookup's
        eos_token_ids: tuple[int, ...] = (),  # where a suffix continuation is cut
    ) -> None:
        self.model = model
        self.lookup = lookup
        self.suffix = suffix
        if vocab_size is None and lookup is None:
            raise ConfigError("a HybridDrafter without a lookup needs vocab_size= (the target's)")
        self.vocab_size = lookup.vocab_size if vocab_size is None else vocab_size
        self.eos = frozenset(eos_token_ids)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        for source in (self.model, self.lookup):
            if source is not None:
                source.begin(input_ids, max_length=max_length)

    def offer(self, tokens: torch.Tensor) -> DraftOptions:
        model = None if self.model is None else self.model.offer(tokens)
        checks = isinstance(self.model, ModelDrafter)  # it takes a guess
        return offer_sources(tokens, self.lookup, model, checks, self.suffix, self.eos)

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
        return copy_then_model(
            self.model, self.vocab_size, tokens, offer, plan, stopper, sampler, eos_token_ids
        )

    def crop(self, num_committed: int) -> None:
        if self.model is not None:
            self.model.crop(num_committed)


def offer_sources(
    tokens: torch.Tensor,
    lookup: PromptLookupDrafter | None,
    model: DraftOptions | None,
    checks: bool,
    suffix: SuffixScope | None,
    eos: frozenset[int],
) -> DraftOptions:
    """What the sources could propose after the committed `tokens` (n,): prompt lookup's
    match, the draft model's catch-up (`model`: its own offer; `checks`: it can check a copy)
    and the suffix cache's continuation (`suffix`'s, cut before `eos`); None: no such source.
    The one offer of generate(), a batch row (drafters/batch.py) and the vLLM proposers."""
    options = lookup.offer(tokens) if lookup is not None else DraftOptions(None)
    if model is not None:
        options = replace(options, catchup=model.catchup, started=model.started, checks=checks)
    return options if suffix is None else offer_suffix(options, suffix, tokens, eos)


def copy_then_model(
    model: ModelDrafter | CrossTokenizerDrafter | None,
    vocab_size: int,
    tokens: torch.Tensor,
    options: DraftOptions,
    plan: DraftPlan,
    stopper: Stopper,
    sampler: TokenSampler,
    eos_token_ids: tuple[int, ...],
    copied: Proposal | None = None,
) -> Proposal:
    """The plan's copied tokens from `options.copy` (`copied`: those already made), then
    the model's (fed the copied ones with its catch-up), the rest of the continuation its
    guess where it takes one."""
    if copied is None:
        copied = copy_proposal(options, plan.copy, sampler, vocab_size)
    if plan.model <= 0 or model is None:
        return copied
    args = (torch.cat([tokens, copied.tokens]), plan.model, stopper, sampler, eos_token_ids)
    if isinstance(model, ModelDrafter):  # a draft of the target's vocabulary: the
        #                                  continuation's next tokens are its guess
        drafted = model.draft(
            *args, first_index=copied.num_copied, guess=guess(options, plan), checked=plan.checked
        )
    else:
        drafted = model.draft(*args, first_index=copied.num_copied)
    return join(copied, drafted)


def guess(options: DraftOptions, plan: DraftPlan) -> torch.Tensor | None:
    """(g,) the continuation's tokens after the copied ones that the plan feeds the draft
    model as a guess of its own next tokens; None for none."""
    if not plan.guess or options.copy is None:
        return None
    return options.copy[plan.copy : plan.copy + plan.guess]


def join(copied: Proposal, drafted: Proposal) -> Proposal:
    """Copied tokens followed by the model's, as one proposal."""
    rows = [p.probs for p in (copied, drafted) if p.probs is not None and p.probs.numel()]
    return Proposal(
        tokens=torch.cat([copied.tokens, drafted.tokens]),  # (m + k,)
        probs=torch.cat(rows) if rows else None,  # (m + k, V), sampling only
        confidences=copied.confidences + drafted.confidences,
        stop_reason=drafted.stop_reason,
        draft_time_s=copied.draft_time_s + drafted.draft_time_s,
        draft_forwards=drafted.draft_forwards,
        catchup=drafted.catchup,
        num_copied=copied.num_copied,
        agreement=copied.agreement,
        guess_fed=drafted.guess_fed,
        guess_hits=drafted.guess_hits,
    )
