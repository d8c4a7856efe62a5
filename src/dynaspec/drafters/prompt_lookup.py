"""Prompt lookup: draft by copying what followed an earlier occurrence of the newest n-gram.

Saxena 2023 ("Prompt Lookup Decoding", github.com/apoorvumang/prompt-lookup-decoding), as
transformers implements it (`PromptLookupCandidateGenerator`, with the same parameter
names): for n from `max_matching_ngram_size` down to 1, find the earlier occurrences of the
last n committed tokens (prompt and generated text alike) that have at least one token after
them, and propose up to `prompt_lookup_num_tokens` of the tokens that follow one of them,
cut before the first EOS. No model runs: a proposal costs a few tensor ops.

Which occurrence: transformers takes the leftmost (`match="leftmost"`, its exact candidates,
tested against it; generate() under the fixed schedules); under the adaptive schedule
dynaspec takes the one whose tokens before it agree furthest back with the newest ones
(`match="longest"`, the leftmost of those). A common n-gram's leftmost occurrence is often in
the wrong place (the instruction, another line of a list): on the target's own outputs of 28
grounded prompts a first copied token at an agreement of 2-3 was right 70% of the time from
the longest occurrence and 52% from the leftmost, so the agreement, by which the copy rule
prices a copy, says more (docs/design/adaptive.md, "Which occurrence"). The output is the target's
either way.

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
MATCHES = ("longest", "leftmost")  # which earlier occurrence is copied from


def match_for(schedule: str) -> str:
    """The occurrence copied from under a schedule: the adaptive copy rule prices a copy by
    its agreement, so "longest"; transformers' fixed schedules keep its "leftmost" (and so
    its rounds)."""
    return "longest" if schedule == "adaptive" else "leftmost"


@dataclass(frozen=True)
class LookupConfig:
    """Prompt lookup's knobs, with transformers' names and defaults."""

    prompt_lookup_num_tokens: int = 10  # most tokens copied per round
    max_matching_ngram_size: int = 2  # longest n-gram matched (tried first, down to 1)
    # the occurrence copied from: "longest" agreement (the leftmost of those), or
    # transformers' "leftmost"
    match: str = "longest"

    def __post_init__(self) -> None:
        for name in ("prompt_lookup_num_tokens", "max_matching_ngram_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1, got {value!r}")
        if self.match not in MATCHES:
            raise ConfigError(
                f"match must be one of {', '.join(map(repr, MATCHES))}, got {self.match!r}"
            )


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
    """An earlier occurrence of the longest matching suffix n-gram of `tokens` (n,): the one
    `config.match` names; None when there is none, or when its continuation starts with EOS
    (transformers stops there too)."""
    total = tokens.numel()
    for size in range(min(config.max_matching_ngram_size, total - 1), 0, -1):
        # Windows starting at 0 .. total-1-size: every one has at least one token after it.
        windows = tokens[:-1].unfold(0, size, 1)  # (total - size, size)
        starts = (windows == tokens[total - size :]).all(1).nonzero().flatten() + size  # (H,)
        if not starts.numel():
            continue
        if config.match == "leftmost":
            starts = starts[:1]
        agreements = _agreements(tokens, starts, max_agreement)  # (H,)
        best = int(agreements.argmax())  # the first (leftmost) of the longest
        start = int(starts[best])  # the first token after the occurrence
        continuation = tokens[start : start + config.prompt_lookup_num_tokens]
        if eos.numel():
            ends = torch.isin(continuation, eos).nonzero()
            if ends.numel():
                continuation = continuation[: int(ends[0, 0])]
        if not continuation.numel():
            return None
        return Match(continuation, int(agreements[best]))
    return None


def _agreements(tokens: torch.Tensor, starts: torch.Tensor, cap: int) -> torch.Tensor:
    """(H,) for each occurrence ending before `starts` (H,): how many tokens before it agree
    with the newest tokens of `tokens` (n,), counted back, at most `cap`."""
    back = torch.arange(cap, device=tokens.device)  # (A,)
    before = starts[:, None] - 1 - back  # (H, A) the positions before each occurrence's end
    newest = tokens.numel() - 1 - back  # (A,) the newest positions; >= before's everywhere
    same = tokens[before.clamp(min=0)] == tokens[newest.clamp(min=0)]  # (H, A)
    return (same & (before >= 0)).int().cumprod(1).sum(1)


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
