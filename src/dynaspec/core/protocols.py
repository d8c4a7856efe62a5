"""The small protocols the decoding loop calls, and the records it passes to them.

Everything above the core (policies, backends, drafters) satisfies one of these protocols,
so the loop never imports a concrete policy, model adapter or draft source. See
docs/architecture.md for the layers and the path of a token through a round.

- `ModelAdapter`: a model behind a cache that can roll back (backends/).
- `LookaheadPolicy`: how many tokens to draft, and when to stop (policies/).
- `Drafter`: a source of draft tokens (drafters/): a draft model, prompt lookup, or both.
- `DraftStep`, `RoundResult`: what a policy sees during and after a round.
- `Proposal`: what a drafter hands to the verification.
- `DraftOptions`, `DraftPlan`, `SourcePlanner`: what the draft sources offer before a round,
  and a policy that chooses among them itself (the cost-aware one does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from dynaspec.core.sampling import TokenSampler


@runtime_checkable
class ModelAdapter(Protocol):
    """What the decoding loop needs from a model."""

    vocab_size: int  # rows of the output distribution
    # Longest token sequence the model accepts (None: unknown or unlimited, e.g. T5's relative
    # positions). Decoder-only: prompt + new tokens. Encoder-decoder: the encoder's input (the
    # prompt) and the decoder's sequence (start token + new tokens) must each fit.
    max_length: int | None
    is_encoder_decoder: bool
    num_cached: int  # tokens currently in the cache (encoder-decoder: decoder tokens)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        """Start a sequence from a (1, T) prompt; return the first committed tokens (n,).

        Decoder-only: the prompt itself. Encoder-decoder: encode the prompt, return (1,) the
        decoder start token. `max_length`, when given, bounds the tokens the cache will hold
        in this sequence (the loop passes prompt + max_new_tokens), so that a static cache can
        be allocated once; adapters with a growing cache ignore it.
        """
        ...

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Append (n,) tokens to the cache; return logits (num_logits, V) of the last ones."""
        ...

    def crop(self, num_tokens: int) -> None:
        """Roll the cache back so it holds its first `num_tokens` tokens."""
        ...


@dataclass(frozen=True)
class DraftStep:
    """What the loop knows right after the draft proposed one token."""

    index: int  # 0-based index of this token within the round's draft
    position: int  # index the token would take in the committed token sequence
    token: int  # the proposed token id
    confidence: float  # draft's processed probability of `token`


@dataclass(frozen=True)
class RoundResult:
    """What a policy learns from one finished round."""

    num_drafted: int  # tokens the draft proposed
    num_accepted: int  # of those, the prefix the target accepted
    confidences: tuple[float, ...]  # draft probability of each drafted token
    draft_time_s: float  # wall time in draft forwards this round (catch-up included)
    target_time_s: float  # wall time of the target's verification forward
    num_verified: int  # tokens in the target's verification forward (num_drafted + 1 usually)
    draft_forwards: int  # draft forward calls this round
    draft_catchup: int = 0  # tokens fed to the draft's first forward (>1: it was behind)
    num_lookup: int = 0  # of the drafted tokens, the first ones copied by prompt lookup
    lookup_match: int = 0  # tokens the lookup match agreed on, back from the newest (0: none)


@runtime_checkable
class LookaheadPolicy(Protocol):
    """How many tokens the draft proposes per round (see dynaspec/policies/__init__.py)."""

    name: str
    stop_reason: str  # recorded in the stats when should_stop() returns True
    # False: the policy decides nothing from single drafted tokens, so the drafter may draft
    # the whole lookahead without reading each token back from the device, and calls
    # should_stop() afterwards. A policy without the attribute is treated as True.
    needs_confidence: bool

    def reset(self) -> None: ...

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int: ...

    def should_stop(self, step: DraftStep) -> bool: ...

    def update(self, result: RoundResult) -> None: ...


@dataclass
class Proposal:
    """The tokens a drafter proposes in one round, and what proposing them cost."""

    tokens: torch.Tensor  # (k,) proposed token ids, k >= 0
    probs: torch.Tensor | None  # (k, V) proposal distributions (sampling only), else None
    confidences: tuple[float, ...]  # drafter's probability of each proposed token
    stop_reason: str  # why drafting stopped: "max", "eos", or the policy's stop reason
    draft_time_s: float = 0.0  # wall time spent proposing (catch-up included)
    forwards: int = 0  # draft model forward calls
    catchup: int = 0  # tokens fed to the draft's first forward (>1: it was behind)
    num_lookup: int = 0  # of `tokens`, the first ones copied by prompt lookup (point masses)
    lookup_match: int = 0  # tokens the lookup match agreed on, back from the newest (0: none)


@dataclass(frozen=True)
class DraftOptions:
    """What the draft sources offer before a round: a function of the committed tokens only."""

    model_catchup: int | None  # tokens the draft model must be fed before its first
    #                            proposal (1: in step); None: there is no draft model
    lookup_tokens: int = 0  # tokens of the prompt-lookup continuation on offer (0: no match)
    lookup_match: int = 0  # tokens the match agrees on, back from the newest (0: no match)


@dataclass(frozen=True)
class DraftPlan:
    """Which sources draft in a round, and how far; fixed before any token is drafted."""

    lookup_tokens: int  # propose this many prompt-lookup tokens first
    model_tokens: int  # then at most this many draft-model tokens (0: the model stands aside)


@runtime_checkable
class SourcePlanner(Protocol):
    """A policy that chooses the draft sources of a round itself (optional). For any other
    policy, lookup proposes its whole continuation and the model carries on after it up to
    the policy's `max_lookahead` (dynaspec.drafters.plan_round)."""

    def plan_sources(self, options: DraftOptions, remaining: int | None) -> DraftPlan: ...


@runtime_checkable
class Drafter(Protocol):
    """A source of draft tokens. Invariant: it never sees a token that is not committed,
    except those it drafted itself this round; `crop` removes those after the round."""

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        """Start a sequence from a (1, T) prompt (`max_length`: see ModelAdapter.begin)."""
        ...

    def max_lookahead(
        self, tokens: torch.Tensor, policy: LookaheadPolicy, remaining: int | None
    ) -> int:
        """The most tokens to draft after the committed `tokens` (n,) this round (0: none),
        as `policy` decides from what this source offers; `remaining` = the most tokens the
        call can still emit. Depends on committed tokens only; `propose` follows it."""
        ...

    def propose(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        policy: LookaheadPolicy,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        """Up to `lookahead` tokens continuing the committed `tokens` (n,)."""
        ...

    def crop(self, num_committed: int) -> None:
        """After a round: forget anything beyond the first `num_committed` tokens."""
        ...
