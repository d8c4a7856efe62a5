"""Prompt lookup: draft by copying what followed an earlier occurrence of the newest n-gram.

Saxena 2023 ("Prompt Lookup Decoding", github.com/apoorvumang/prompt-lookup-decoding), as
transformers implements it (`PromptLookupCandidateGenerator`, with the same parameter
names): for n from `max_matching_ngram_size` down to 1, find the leftmost earlier
occurrence of the last n committed tokens (prompt and generated text alike) that has at
least one token after it, and propose up to `prompt_lookup_num_tokens` of the tokens that
follow it, cut before the first EOS. No model runs: a proposal costs a few tensor ops.

A copied token is not drawn from a distribution, so for speculative sampling its proposal
is a point mass (a one-hot row): the target accepts it with its own probability of the
token, and on rejection samples from its distribution with that token removed and
renormalised, which is what `core.verify.speculative_sample` computes for a one-hot row.

Two differences from transformers: the match search is over the committed tokens only
(an encoder-decoder model's decoder tokens, as in transformers), and processors that forbid
tokens are not consulted (a forbidden token has target probability 0 and is rejected).
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter

import torch

from dynaspec.core.protocols import (
    DraftOptions,
    DraftPlan,
    LookaheadPolicy,
    Proposal,
    SourcePlanner,
)
from dynaspec.core.sampling import TokenSampler
from dynaspec.errors import ConfigError

MAX_MATCH_LENGTH = 32  # how far back a match's agreement is counted (a policy's feature)


@dataclass(frozen=True)
class LookupConfig:
    """Prompt lookup's knobs, with transformers' names and defaults."""

    prompt_lookup_num_tokens: int = 10  # most tokens copied per round
    max_matching_ngram_size: int = 2  # longest n-gram matched (tried first, down to 1)

    def __post_init__(self) -> None:
        for name in ("prompt_lookup_num_tokens", "max_matching_ngram_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class Match:
    """An earlier occurrence of the newest tokens, and what followed it."""

    continuation: torch.Tensor  # (L,) the tokens that followed it, cut before the first EOS
    length: int  # tokens it agrees on, back from the newest (>= the n-gram size, capped)


def find_match(
    tokens: torch.Tensor,
    config: LookupConfig,
    eos: torch.Tensor,
    max_length: int = MAX_MATCH_LENGTH,
) -> Match | None:
    """The leftmost earlier occurrence of the longest matching suffix n-gram of `tokens` (n,),
    with transformers' semantics; None when there is none (or it is followed by EOS)."""
    total = tokens.numel()
    for size in range(min(config.max_matching_ngram_size, total - 1), 0, -1):
        # Windows starting at 0 .. total-1-size: every one has at least one token after it.
        windows = tokens[:-1].unfold(0, size, 1)  # (total - size, size)
        hits = (windows == tokens[total - size :]).all(1).nonzero()
        if not hits.numel():
            continue
        start = int(hits[0, 0]) + size  # first token after the occurrence
        continuation = tokens[start : start + config.prompt_lookup_num_tokens]
        if eos.numel():
            ends = torch.isin(continuation, eos).nonzero()
            if ends.numel():
                continuation = continuation[: int(ends[0, 0])]
        if not continuation.numel():  # transformers stops searching here too
            return None
        reach = min(max_length, start)
        before = tokens[start - reach : start].flip(0)  # (reach,) newest first
        newest = tokens[total - reach :].flip(0)  # (reach,)
        length = int((before == newest).int().cumprod(0).sum())
        return Match(continuation, length)
    return None


def point_masses(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(k, V) float32 one-hot rows: the proposal distribution of copied tokens."""
    rows = torch.zeros(tokens.numel(), vocab_size, device=tokens.device)  # (k, V)
    return rows.scatter_(1, tokens.view(-1, 1), 1.0)


def lookup_proposal(
    match: Match, count: int, sampler: TokenSampler, vocab_size: int, seconds: float
) -> Proposal:
    """The first `count` tokens of `match` as a Proposal of point masses."""
    tokens = match.continuation[:count]
    return Proposal(
        tokens=tokens,  # (k,)
        probs=point_masses(tokens, vocab_size) if sampler.config.do_sample else None,  # (k, V)
        confidences=(1.0,) * tokens.numel(),
        stop_reason="max",
        draft_time_s=seconds,
        num_lookup=tokens.numel(),
        lookup_match=match.length if tokens.numel() else 0,
    )


def plan_round(policy: LookaheadPolicy, options: DraftOptions, remaining: int | None) -> DraftPlan:
    """The sources of a round: the policy's own choice when it is a SourcePlanner; otherwise
    the whole lookup continuation, then the draft model up to the policy's max_lookahead
    (counting the copied tokens)."""
    if isinstance(policy, SourcePlanner):
        return policy.plan_sources(options, remaining)
    copied = options.lookup_tokens
    if options.model_catchup is None:
        return DraftPlan(copied, 0)
    total = policy.max_lookahead(options.model_catchup + copied, remaining)
    return DraftPlan(copied, max(total - copied, 0))


class PromptLookupDrafter:
    """Prompt lookup alone: no draft model, no cache; the policy chooses how many to copy."""

    def __init__(self, config: LookupConfig, vocab_size: int, eos_token_ids: tuple[int, ...]):
        self.config = config
        self.vocab_size = vocab_size
        self.eos = torch.tensor(eos_token_ids, dtype=torch.long)
        self.match = Match(torch.empty(0, dtype=torch.long), 0)  # the round's (may be empty)
        self.plan = DraftPlan(0, 0)
        self.search_s = 0.0  # wall time of the last search

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        self.eos = self.eos.to(input_ids.device)

    def find(self, tokens: torch.Tensor) -> Match:
        """Searches the committed `tokens` (n,); remembers the match (empty when there is
        none) for `propose`."""
        start = perf_counter()
        match = find_match(tokens, self.config, self.eos)
        self.match = match if match is not None else Match(tokens.new_empty(0), 0)
        self.search_s = perf_counter() - start
        return self.match

    def options(self, match: Match, model_catchup: int | None = None) -> DraftOptions:
        return DraftOptions(model_catchup, match.continuation.numel(), match.length)

    def max_lookahead(
        self, tokens: torch.Tensor, policy: LookaheadPolicy, remaining: int | None
    ) -> int:
        self.plan = plan_round(policy, self.options(self.find(tokens)), remaining)
        return self.plan.lookup_tokens

    def propose(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        policy: LookaheadPolicy,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        count = min(lookahead, self.plan.lookup_tokens)
        return lookup_proposal(self.match, count, sampler, self.vocab_size, self.search_s)

    def crop(self, num_committed: int) -> None:
        pass  # nothing is cached: every search reads the committed tokens
