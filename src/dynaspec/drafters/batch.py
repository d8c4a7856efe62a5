"""Draft sources for a batch of rows: prompt lookup and the suffix cache per row, the draft
model batched.

Each row gets what a single sequence gets: an offer from its own committed tokens (its
lookup match, its model catch-up), its own plan and stopper from its own policy, and a
proposal of copied tokens first, then the draft model's. The draft model drafts for every
row that plans model tokens in the same forwards (a row that has stopped is fed nothing
more; its place in the block is padding), one token per row and forward, each row
processed and stopped by its own sampler and stopper.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import torch

from dynaspec.core.drafting import own_stopper
from dynaspec.core.finite import require_finite
from dynaspec.core.protocols import BatchModelAdapter, BatchStopper
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.timing import device_clock
from dynaspec.drafters.draft_model import ModelDrafter
from dynaspec.drafters.hybrid import HybridDrafter, copy_then_model, join, offer_sources
from dynaspec.drafters.prompt_lookup import LookupConfig, PromptLookupDrafter, copy_proposal
from dynaspec.drafters.suffix_cache import SuffixScope

DRAFT_SOURCES = ("model", "lookup", "suffix")  # what a row may be limited to (`join`)
ALL_SOURCES = frozenset(DRAFT_SOURCES)
# The drafters (of make_drafter) whose sources BatchDrafter drafts with the draft model's
# forwards shared between the rows; any other drafts row by row (`Row.drafter`)
SHARED_FORWARDS = (ModelDrafter, PromptLookupDrafter, HybridDrafter)


@dataclass
class _Drafting:
    """One row's draft-model tokens while the model drafts, within one `propose` call."""

    sequence: torch.Tensor  # (n + m,) the row's committed tokens, then its copied ones
    first_index: int  # copied tokens before the model's (offsets the DraftStep index)
    limit: int  # the most model tokens the plan allows
    sampler: TokenSampler
    catchup: int  # tokens fed in the row's first forward
    tokens: list[torch.Tensor] = field(default_factory=list)  # 0-dim token ids
    probs: list[torch.Tensor] = field(default_factory=list)  # (V,) rows, sampling only
    confidences: list[float] = field(default_factory=list)
    reason: StopReason | None = None  # set when the row stops drafting
    seconds: float = 0.0  # time of the forwards the row took part in

    def proposal(self) -> Proposal:
        """The row's model tokens as a Proposal on the committed tokens' device."""
        device = self.sequence.device
        kept = len(self.confidences)
        return Proposal(
            tokens=torch.stack(self.tokens[:kept]).to(device),  # (k,)
            probs=torch.stack(self.probs[:kept]).to(device) if self.probs else None,
            confidences=tuple(self.confidences),
            stop_reason=self.reason or StopReason.MAX,
            draft_time_s=self.seconds,
            draft_forwards=len(self.tokens),
            catchup=self.catchup,
        )


class RowView:
    """Row `row` of a batch adapter as one sequence's `ModelAdapter`: the other rows are fed
    nothing and keep their caches."""

    is_encoder_decoder = False

    def __init__(self, batch: BatchModelAdapter, row: int) -> None:
        self.batch, self.row = batch, row
        self.vocab_size = batch.vocab_size
        self.max_length = batch.max_length
        self.device = getattr(batch, "device", None)

    @property
    def num_cached(self) -> int:
        return self.batch.num_cached[self.row]

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        raise NotImplementedError("a row of a batch begins with the batch")

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        rows, empty = len(self.batch.num_cached), new_tokens[:0]
        feeds = [new_tokens if row == self.row else empty for row in range(rows)]
        wanted = [num_logits if row == self.row else 0 for row in range(rows)]
        return self.batch.forward(feeds, wanted)[self.row]

    def crop(self, num_tokens: int) -> None:
        cached = self.batch.num_cached
        self.batch.crop([num_tokens if row == self.row else n for row, n in enumerate(cached)])


class BatchDrafter:
    """Prompt lookup (a `lookup` config), the batched draft model, the suffix cache (one
    index, each row reading its own scope: `scopes`), or some of them."""

    def __init__(
        self,
        model: BatchModelAdapter | None,
        lookup: LookupConfig | None,
        vocab_size: int,
        eos_token_ids: tuple[int, ...],
        suffix: SuffixScope | None = None,
    ) -> None:
        self.model = model
        self.lookup = PromptLookupDrafter(lookup, vocab_size, eos_token_ids) if lookup else None
        self.vocab_size = vocab_size
        self.suffix = suffix  # the cache, and the scope of rows that join without one
        self.scopes: list[SuffixScope | None] = []  # per row: the scope it reads
        self.allowed: list[frozenset[str]] = []  # per row: the DRAFT_SOURCES it may use
        self.eos = frozenset(eos_token_ids)

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        if self.model is not None:
            self.model.begin(input_ids, attention_mask)
        if self.lookup is not None:
            self.lookup.begin(input_ids)
        self.scopes = [self.suffix] * input_ids.shape[0]
        self.allowed = [ALL_SOURCES] * input_ids.shape[0]

    def join(
        self,
        prompt: torch.Tensor,
        scope: str | None = None,
        sources: Collection[str] | None = None,
    ) -> None:
        """A row joins the batch with `prompt` (n,) (continuous batching), reading the suffix
        cache's `scope` (None: the drafter's) and drafting from `sources` only (of
        DRAFT_SOURCES; None: all there are; empty: none, the target alone). The draft model
        caches none of it now: the row is a lagging row whose catch-up (its whole prompt) the
        policy starts when the tokens it saves repay it (policies/batch_adaptive.py), as for
        the rows of a fixed batch, so a joining request's first token never waits for it."""
        if self.model is not None:
            self.model.join(prompt[-1:])  # a one-token prompt: nothing cached
        suffix = self.suffix
        self.scopes.append(suffix if suffix is None or scope is None else suffix.cache.scope(scope))
        self.allowed.append(ALL_SOURCES if sources is None else frozenset(sources))

    def leave(self, keep: Sequence[int]) -> None:
        """Only the rows `keep` go on, in that order."""
        if self.model is not None:
            self.model.leave(keep)
        self.scopes = [self.scopes[row] for row in keep]
        self.allowed = [self.allowed[row] for row in keep]

    def remember(self, row: int, tokens: torch.Tensor) -> None:
        """Adds row `row`'s text (its prompt and output, no padding) to its suffix scope."""
        if row < len(self.scopes) and (scope := self.scopes[row]) is not None:
            scope.add(tokens.tolist())

    def offer(self, row: int, tokens: torch.Tensor, pads: int) -> DraftOptions:
        """What row `row` could draft after its committed `tokens` (n,), whose first `pads`
        are left padding: `offer_sources` over the row's allowed sources (the draft model's
        offer is generate()'s `ModelDrafter`'s over the row, its cache holding the padding
        too; the copy sources search the tokens without it). A batch of one row offers what
        generate()'s hybrid offers: the draft model may check a copy (`checks`)."""
        allowed = self.allowed[row] if row < len(self.allowed) else ALL_SOURCES
        batch = self.model if "model" in allowed else None
        model = None if batch is None else ModelDrafter(RowView(batch, row)).offer(tokens)
        checks = batch is not None and len(batch.num_cached) == 1
        lookup = self.lookup if "lookup" in allowed else None
        scope = self.scopes[row] if row < len(self.scopes) and "suffix" in allowed else None
        return offer_sources(tokens[pads:], lookup, model, checks, scope, self.eos)

    def propose(
        self,
        tokens: Sequence[torch.Tensor | None],
        options: Sequence[DraftOptions | None],
        plans: Sequence[DraftPlan],
        stopper: BatchStopper,
        samplers: Sequence[TokenSampler],
        eos_token_ids: Sequence[tuple[int, ...]],
    ) -> list[Proposal | None]:
        """Per row (None: the row drafts nothing this round), the tokens its plan asks for;
        the draft model stops where `stopper` says, or at a row's EOS (eos_token_ids[row])
        or its plan's end."""
        model = self.model
        copied: list[Proposal | None] = []
        drafting: dict[int, _Drafting] = {}
        for row, plan in enumerate(plans):
            offer, sequence, sampler = options[row], tokens[row], samplers[row]
            if offer is None or sequence is None or not plan.total:
                copied.append(None)
                continue
            copy = copy_proposal(offer.chosen(plan.source), plan.copy, sampler, self.vocab_size)
            copied.append(copy)
            if plan.model > 0 and model is not None:
                ahead = torch.cat([sequence, copy.tokens])
                catchup = ahead.numel() - model.num_cached[row]
                drafting[row] = _Drafting(ahead, copy.num_copied, plan.model, sampler, catchup)
        if len(drafting) == 1:  # one row drafts: as generate()'s hybrid, its guess and its
            #                     checked copy, by `ModelDrafter` over the row (`RowView`)
            row = next(iter(drafting))
            offer, sequence = options[row], tokens[row]
            assert model is not None and offer is not None and sequence is not None
            copied[row] = copy_then_model(
                ModelDrafter(RowView(model, row)),
                self.vocab_size,
                sequence,
                offer.chosen(plans[row].source),
                plans[row],
                own_stopper(stopper, row),  # the row's own where the policy is one per row
                samplers[row],
                eos_token_ids[row],
                copied[row],
            )
            return copied
        self._draft(drafting, stopper, eos_token_ids)
        return [
            copy if copy is None or row not in drafting else join(copy, drafting[row].proposal())
            for row, copy in enumerate(copied)
        ]

    def _draft(
        self,
        drafting: dict[int, _Drafting],
        stopper: BatchStopper,
        eos_token_ids: Sequence[tuple[int, ...]],
    ) -> None:
        """Batched draft-model forwards until every row in `drafting` has stopped."""
        if not drafting or self.model is None:
            return
        model = self.model
        rows = len(model.num_cached)
        empty = torch.empty(0, dtype=torch.long)
        pending = {row: d.sequence[model.num_cached[row] :] for row, d in drafting.items()}
        device = getattr(model, "device", None)
        while pending:
            started = device_clock(device)
            feeds = [pending.get(row, empty) for row in range(rows)]
            logits = model.forward(feeds, [int(row in pending) for row in range(rows)])
            seconds = device_clock(device) - started
            steps = {}
            for row in pending:
                drafting[row].seconds += seconds
                step = self._next(drafting[row], logits[row][0])
                if step.token in eos_token_ids[row]:
                    drafting[row].reason = StopReason.EOS
                else:
                    steps[row] = step
            for row, reason in stopper.stop(steps).items():
                drafting[row].reason = reason
            for row in list(pending):
                state = drafting[row]
                if state.reason is None and len(state.tokens) >= state.limit:
                    state.reason = StopReason.MAX
                if state.reason is None:
                    pending[row] = state.tokens[-1].view(1)
                else:
                    del pending[row]

    def _next(self, state: _Drafting, logits: torch.Tensor) -> DraftStep:
        """One drafted token of a row, as the step its stopper sees."""
        sampler, sequence = state.sampler, state.sequence
        logits = logits.to(sequence.device)
        require_finite(logits, self.model)
        token, probs = sampler.next_draft(logits, sequence, state.tokens)
        state.tokens.append(token)
        if sampler.config.do_sample:
            state.probs.append(probs)
        index = len(state.tokens) - 1
        step = DraftStep(
            state.first_index + index, sequence.numel() + index, int(token), float(probs[token])
        )
        state.confidences.append(step.confidence)
        return step

    def crop(self, num_committed: Sequence[int]) -> None:
        if self.model is not None:
            cached = self.model.num_cached
            self.model.crop([min(n, c) for n, c in zip(num_committed, cached, strict=True)])
