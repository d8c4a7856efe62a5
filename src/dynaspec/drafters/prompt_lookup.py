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

from dynaspec.core.protocols import Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, Proposal
from dynaspec.core.sampling import TokenSampler
from dynaspec.errors import ConfigError

MAX_AGREEMENT = 32  # how far back a match's agreement is counted (a policy's feature)


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
    agreement: int  # tokens it agrees on, back from the newest (>= the n-gram size, capped)


def find_match(
    tokens: torch.Tensor,
    config: LookupConfig,
    eos: torch.Tensor,
    max_agreement: int = MAX_AGREEMENT,
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
        reach = min(max_agreement, start)
        before = tokens[start - reach : start].flip(0)  # (reach,) newest first
        newest = tokens[total - reach :].flip(0)  # (reach,)
        agreement = int((before == newest).int().cumprod(0).sum())
        return Match(continuation, agreement)
    return None


def point_masses(tokens: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(k, V) float32 one-hot rows: the proposal distribution of copied tokens."""
    rows = torch.zeros(tokens.numel(), vocab_size, device=tokens.device)  # (k, V)
    return rows.scatter_(1, tokens.view(-1, 1), 1.0)


def copy_proposal(
    options: DraftOptions, count: int, sampler: TokenSampler, vocab_size: int
) -> Proposal:
    """The first `count` tokens on offer in `options` as a Proposal of point masses; its
    time is the search's."""
    copy = options.copy if options.copy is not None else torch.empty(0, dtype=torch.long)
    tokens = copy[:count]  # (k,)
    return Proposal(
        tokens=tokens,
        probs=point_masses(tokens, vocab_size) if sampler.config.do_sample else None,
        confidences=(1.0,) * tokens.numel(),
        draft_time_s=options.search_s,
        num_copied=tokens.numel(),
        agreement=options.agreement if tokens.numel() else 0,
    )


class PromptLookupDrafter:
    """Prompt lookup alone: no draft model, no cache; the policy chooses how many to copy."""

    def __init__(self, config: LookupConfig, vocab_size: int, eos_token_ids: tuple[int, ...]):
        self.config = config
        self.vocab_size = vocab_size
        self.eos = torch.tensor(eos_token_ids, dtype=torch.long)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        self.eos = self.eos.to(input_ids.device)

    def offer(self, tokens: torch.Tensor) -> DraftOptions:
        """Searches the committed `tokens` (n,) for a match."""
        start = perf_counter()
        match = find_match(tokens, self.config, self.eos)
        seconds = perf_counter() - start
        if match is None:
            return DraftOptions(None, search_s=seconds)
        return DraftOptions(None, match.continuation, match.agreement, seconds)

    def propose(
        self,
        tokens: torch.Tensor,
        options: DraftOptions,
        plan: DraftPlan,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        return copy_proposal(options, plan.copy, sampler, self.vocab_size)

    def crop(self, num_committed: int) -> None:
        pass  # nothing is cached: every search reads the committed tokens
