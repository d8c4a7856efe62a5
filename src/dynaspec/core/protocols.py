"""The small protocols the decoding loop calls; the values they pass are in core/round.py.

Everything above the core (policies, backends, drafters) satisfies one of these protocols,
so the loop never imports a concrete policy, model adapter or draft source. See
docs/design/architecture.md for the layers and the path of a token through a round.

- `ModelAdapter`: a model behind a cache that can roll back (backends/).
- `LookaheadPolicy`: plans each round and learns from it (policies/); its `Stopper` decides,
  during one round, when the draft model stops.
- `Drafter`: a source of draft tokens (drafters/): a draft model, prompt lookup, or both.

Those are one sequence's, and every entry point calls them: generate(), each row of a batch
(`Row.policy`, `Row.drafter`; a row's model: a fork of the adapter, backends/row_adapters.py),
the vLLM proposers. A batch adds coordinators over its rows where they share forwards:
`BatchModelAdapter` (the target's and draft's forwards: backends/static_batch.py and
hf_batch.py), `BatchPolicy` (a rule that prices the rows' drafts together) and `BatchDrafter`
(the draft model's forwards shared between rows), with its `BatchStopper`. None of them is
a second protocol to write for a new part: a backend, policy or drafter written for one
sequence reaches batches and the server as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, Round, StopReason

if TYPE_CHECKING:
    from dynaspec.core.sampling import TokenSampler


@runtime_checkable
class ModelAdapter(Protocol):
    """What the decoding loop needs from a model: the one protocol a backend implements.

    An adapter that can also `fork()` (return a second adapter over the same weights with a
    cache of its own; not part of the protocol, since generate() alone does not need it)
    runs in batches and the server too, one fork per row (backends/row_adapters.py), and can
    be its own draft (core/sharing.py)."""

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


@runtime_checkable
class BatchModelAdapter(Protocol):
    """A model over a batch of left-padded rows, each fed its own number of tokens.

    Derived from any forking `ModelAdapter` (`RowAdapters`: a forward per row); written only
    as a coordinator whose rows share forwards (`StaticBatchAdapter`, `HFBatchAdapter`)."""

    vocab_size: int
    max_length: int | None
    num_cached: list[int]  # per row: tokens of its sequence (left padding included) cached
    num_pads: list[int]  # per row: left padding at the start of its sequence
    packs_rows: bool  # whether a forward costs what its tokens cost (the rows packed), not
    #                   B x the widest row's (padded to a block)

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Start the rows of a (B, T) left-padded prompt; nothing is fed yet."""
        ...

    def forward(
        self, new_tokens: Sequence[torch.Tensor], num_logits: Sequence[int]
    ) -> list[torch.Tensor]:
        """Append new_tokens[row] (n_row,) to each row in one forward (a row may get none);
        return per row the logits (num_logits[row], V) of its last tokens."""
        ...

    def crop(self, num_tokens: Sequence[int]) -> None:
        """Roll each row back to at most its first num_tokens[row] tokens (see num_cached)."""
        ...

    def bytes_per_token(self) -> int:
        """Cache bytes one cached token of one row takes (keys and values, every layer)."""
        ...

    def prefill(self, tokens: torch.Tensor, own: Any = None) -> Any:
        """A joining row's own cache with `tokens` (n,) appended to `own` (None: empty): its
        prompt, whole or in chunks between rounds (chunked prefill)."""
        ...

    def join(self, prompt: torch.Tensor, own: Any = None) -> None:
        """Add a row whose sequence starts with `prompt` (n,): its first n - 1 tokens cached
        (by `prefill`: `own`, or here), the last fed with its first round (continuous
        batching)."""
        ...

    def leave(self, keep: Sequence[int]) -> None:
        """Keep only the rows `keep`, in that order."""
        ...


@runtime_checkable
class Stopper(Protocol):
    """When the draft model stops drafting, within one round; made by the policy for that
    round (`LookaheadPolicy.stopper`) and dropped after it."""

    reason: StopReason  # recorded when should_stop() returns True
    # False: it decides nothing from single drafted tokens, so the drafter may draft the
    # whole plan without reading each token back from the device, and asks afterwards.
    needs_confidence: bool

    def should_stop(self, step: DraftStep) -> bool:
        """After the draft proposed one token: stop now? (the token is still checked)"""
        ...


@runtime_checkable
class LookaheadPolicy(Protocol):
    """Plans how far the sources draft each round (see dynaspec/policies/__init__.py)."""

    name: str

    def reset(self) -> None:
        """Forget everything learned."""
        ...

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        """The round's plan from what the sources offer; `remaining` = the most tokens the
        call can still emit (None: unknown). Depends on committed tokens only."""
        ...

    def stopper(self, plan: DraftPlan) -> Stopper:
        """The stop rule of the round that follows `plan`."""
        ...

    def update(self, round: Round) -> None:
        """Learn from the finished round."""
        ...


@runtime_checkable
class BatchStopper(Protocol):
    """When the draft model stops, for the rows of a batch within one round: the rows' own
    stoppers (core/drafting.py's `RowStoppers`), or a batch rule's joint one."""

    def stop(self, steps: dict[int, DraftStep]) -> dict[int, StopReason]:
        """After one batched draft forward: `steps` holds each drafting row's new token;
        returns the rows that stop now (their token is still checked) and why."""
        ...


@runtime_checkable
class BatchPolicy(Protocol):
    """A batch rule: the coordinator that plans the rows of a batch together where their
    drafts share the batch's forwards and are priced together (the adaptive rule,
    policies/batch_adaptive.py). It is not a second kind of policy: rows without one each
    plan with their own `LookaheadPolicy` (`Row.policy`), as they would alone."""

    def plan(
        self, options: Sequence[DraftOptions | None], remaining: Sequence[int]
    ) -> list[DraftPlan]:
        """Per row (None: the row has ended, plan nothing) its plan from its offer;
        `remaining` = the most tokens each row may still emit."""
        ...

    def stopper(self, plans: Sequence[DraftPlan]) -> BatchStopper:
        """The stop rule of the round that follows `plans`."""
        ...

    def update(self, rounds: Sequence[Round | None]) -> None:
        """Learn from the finished round: each row's record (None: the row had ended)."""
        ...

    def join(self, prefill_tokens: int = 0, prefill_s: float = 0.0) -> None:
        """A row joins the batch (continuous batching); the target prefilled its prompt,
        `prefill_tokens` tokens, in `prefill_s` seconds (0: not timed)."""
        ...


@runtime_checkable
class Drafter(Protocol):
    """A source of draft tokens. Invariant: it never sees a token that is not committed,
    except those it drafted itself this round; `crop` removes those after the round."""

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        """Start a sequence from a (1, T) prompt (`max_length`: see ModelAdapter.begin)."""
        ...

    def offer(self, tokens: torch.Tensor) -> DraftOptions:
        """What this source could propose after the committed `tokens` (n,): a function of
        them only (the lookup match, the draft model's catch-up); changes nothing."""
        ...

    def propose(
        self,
        tokens: torch.Tensor,
        options: DraftOptions,
        plan: DraftPlan,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        """The tokens `plan` asks for, continuing the committed `tokens` (n,): `plan.copy`
        of `options.copy`, then at most `plan.model` from the draft model, which stops
        where `stopper` or an EOS says."""
        ...

    def crop(self, num_committed: int) -> None:
        """After a round: forget anything beyond the first `num_committed` tokens."""
        ...


@runtime_checkable
class BatchDrafter(Protocol):
    """A batch drafter: the coordinator that drafts for the rows of a batch with the draft
    model's forwards shared between them (drafters/batch.py): per row an offer, one `propose`
    for all rows (the draft model batched), a rollback per row. It is not a second kind of
    drafter: rows without one each draft with their own `Drafter` (`Row.drafter`)."""

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None: ...

    def offer(self, row: int, tokens: torch.Tensor, pads: int) -> DraftOptions: ...

    def propose(
        self,
        tokens: Sequence[torch.Tensor | None],
        options: Sequence[DraftOptions | None],
        plans: Sequence[DraftPlan],
        stopper: BatchStopper,
        samplers: Sequence[TokenSampler],
        eos_token_ids: Sequence[tuple[int, ...]],
    ) -> list[Proposal | None]: ...

    def crop(self, num_committed: Sequence[int]) -> None: ...

    def join(self, prompt: torch.Tensor) -> None:
        """A row joins with `prompt` (n,); the draft model caches none of it yet."""
        ...

    def leave(self, keep: Sequence[int]) -> None: ...
