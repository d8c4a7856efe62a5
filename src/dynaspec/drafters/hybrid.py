"""A draft model and prompt lookup together: copy what a match offers, then let the model
carry on where the copy ends, or let it stand aside.

Before a round the policy sees what both sources offer (the lookup continuation and its
match length, the model's catch-up; `DraftOptions`) and fixes a `DraftPlan`: m copied
tokens first, then at most some model tokens. Everything it sees is a function of the
committed tokens, never of tokens drafted in the same round, so the choice of source cannot
bias sampling. When the model carries on, the m copied tokens are fed to it in its first
forward (with any committed tokens it missed), and it drafts after them as usual; its cache
then holds the copied tokens too, and the loop's crop removes the rejected ones.
"""

from __future__ import annotations

import torch

from dynaspec.core.protocols import DraftPlan, LookaheadPolicy, Proposal
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters.draft_model import ModelDrafter
from dynaspec.drafters.prompt_lookup import PromptLookupDrafter, lookup_proposal, plan_round


class HybridDrafter:
    """Prompt lookup first, then the draft model, as the policy plans each round."""

    def __init__(self, model: ModelDrafter, lookup: PromptLookupDrafter) -> None:
        self.model = model
        self.lookup = lookup
        self.plan = DraftPlan(0, 0)  # the round's, fixed in max_lookahead

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        self.model.begin(input_ids, max_length=max_length)
        self.lookup.begin(input_ids, max_length=max_length)

    def max_lookahead(
        self, tokens: torch.Tensor, policy: LookaheadPolicy, remaining: int | None
    ) -> int:
        match = self.lookup.find(tokens)
        options = self.lookup.options(match, self.model.catchup(tokens.numel()))
        self.plan = plan_round(policy, options, remaining)
        return self.plan.lookup_tokens + self.plan.model_tokens

    def propose(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        policy: LookaheadPolicy,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        lookup = self.lookup
        copied = lookup_proposal(
            lookup.match,
            min(lookahead, self.plan.lookup_tokens),
            sampler,
            lookup.vocab_size,
            lookup.search_s,
        )
        more = min(lookahead - copied.num_lookup, self.plan.model_tokens)
        if more <= 0:
            return copied
        drafted = self.model.propose(
            torch.cat([tokens, copied.tokens]),
            more,
            policy,
            sampler,
            eos_token_ids,
            first_index=copied.num_lookup,
        )
        return join(copied, drafted)

    def crop(self, num_committed: int) -> None:
        self.model.crop(num_committed)


def join(copied: Proposal, drafted: Proposal) -> Proposal:
    """Copied tokens followed by the model's, as one proposal."""
    rows = [p.probs for p in (copied, drafted) if p.probs is not None and p.probs.numel()]
    return Proposal(
        tokens=torch.cat([copied.tokens, drafted.tokens]),  # (m + k,)
        probs=torch.cat(rows) if rows else None,  # (m + k, V), sampling only
        confidences=copied.confidences + drafted.confidences,
        stop_reason=drafted.stop_reason,
        draft_time_s=copied.draft_time_s + drafted.draft_time_s,
        forwards=drafted.forwards,
        catchup=drafted.catchup,
        num_lookup=copied.num_lookup,
        lookup_match=copied.lookup_match,
    )
