"""A draft model as a draft source: it proposes tokens one forward at a time.

The draft's cache follows the same invariant as the target's (see docs/architecture.md):
it holds committed tokens only, and may lag behind after rounds without drafting; it then
catches up by being fed every committed token it has not seen in its first forward.

Waiting for the device: a stopper that decides after each token (`needs_confidence`) gets
the token, its confidence and the finite-logits check in one transfer per drafted token. Any
other drafts the whole plan without reading anything back, and the tokens, confidences and
checks come back in one transfer at the end; the stopper's `should_stop` and the EOS check
then run over them in order, and the proposal ends where they say (the draft may have run a
few forwards past that point; `crop` forgets them).
"""

from __future__ import annotations

import torch

from dynaspec.core.protocols import ModelAdapter, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.timing import device_clock
from dynaspec.core.validation import check_finite


class ModelDrafter:
    """Drafts with a `ModelAdapter`, asking the round's stopper after each token."""

    def __init__(self, model: ModelAdapter) -> None:
        self.model = model
        self.device = getattr(model, "device", None)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        self.model.begin(input_ids, max_length=max_length)

    def catchup(self, num_committed: int) -> int:
        """Committed tokens the draft must still be fed before its first proposal."""
        return num_committed - self.model.num_cached

    def offer(self, tokens: torch.Tensor) -> DraftOptions:
        return DraftOptions(catchup=self.catchup(tokens.numel()))

    def propose(
        self,
        tokens: torch.Tensor,
        options: DraftOptions,
        plan: DraftPlan,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        return self.draft(tokens, plan.model, stopper, sampler, eos_token_ids)

    def draft(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
        first_index: int = 0,
    ) -> Proposal:
        """Up to `lookahead` tokens after `tokens` (committed, then any tokens another source
        proposed this round: `first_index` of them, which offsets the DraftStep index the
        stopper sees)."""
        per_token = stopper.needs_confidence
        pending = tokens[self.model.num_cached :]  # tokens the draft has not seen: >= newest
        catchup = pending.numel()
        drafted: list[torch.Tensor] = []  # 0-dim token ids
        rows: list[torch.Tensor] = []  # (V,) distributions, sampling only
        checks: list[torch.Tensor] = []  # per token: (token, confidence, finite) as float64
        steps: list[DraftStep] = []
        stop_reason = StopReason.MAX
        started = device_clock(self.device)
        for index in range(lookahead):
            logits = self.model.forward(pending, 1)[0]  # (V,)
            if sampler.processors and logits.device != tokens.device:
                # transformers' processors hold tensors on the target's device: a draft on
                # another device is processed, and samples, there.
                logits = logits.to(tokens.device)
            try:
                token, probs = sampler.next_draft(logits, tokens, drafted)
            except RuntimeError:  # torch.multinomial refuses NaN/inf probabilities
                check_finite(bool(torch.isfinite(logits).all()), self.model)
                raise
            drafted.append(token)
            if sampler.config.do_sample:  # only speculative sampling needs the rows
                rows.append(probs)
            checks.append(torch.stack([token.double(), probs[token].double(), _finite(logits)]))
            if per_token:  # one transfer: the token, its confidence and the check
                step, reason = self._step(
                    checks[-1].tolist(), index, first_index, tokens, stopper, eos_token_ids
                )
                steps.append(step)
                if reason is not None:
                    stop_reason = reason
                    break
            pending = token.view(1)
        if not per_token and drafted:  # one transfer for the whole draft, then the stopper
            for index, values in enumerate(torch.stack(checks).tolist()):
                step, reason = self._step(
                    values, index, first_index, tokens, stopper, eos_token_ids
                )
                steps.append(step)
                if reason is not None:
                    stop_reason = reason
                    break
        kept = len(steps)
        # (k,) tokens and (k, V) rows on the committed tokens' (target's) device, wherever
        # the draft runs.
        return Proposal(
            tokens=torch.stack(drafted[:kept]).to(tokens.device) if kept else tokens.new_empty(0),
            probs=torch.stack(rows[:kept]).to(tokens.device) if rows else None,  # (k, V)
            confidences=tuple(step.confidence for step in steps),
            stop_reason=stop_reason,
            draft_time_s=device_clock(self.device) - started,
            draft_forwards=len(drafted),
            catchup=catchup,
        )

    def _step(
        self,
        values: list[float],
        index: int,
        first_index: int,
        tokens: torch.Tensor,
        stopper: Stopper,
        eos_token_ids: tuple[int, ...],
    ) -> tuple[DraftStep, StopReason | None]:
        """The DraftStep of the `index`-th drafted token (host values; `first_index` tokens
        another source proposed come before it), and why drafting stops there (None: on)."""
        token, confidence, finite = values
        check_finite(finite == 1.0, self.model)
        step = DraftStep(first_index + index, tokens.numel() + index, int(token), confidence)
        if step.token in eos_token_ids:
            return step, StopReason.EOS
        if stopper.should_stop(step):
            return step, stopper.reason
        return step, None

    def crop(self, num_committed: int) -> None:
        self.model.crop(min(self.model.num_cached, num_committed))


def _finite(logits: torch.Tensor) -> torch.Tensor:
    """1.0 when every logit is finite, else 0.0 (float64, on the device: no wait)."""
    return torch.isfinite(logits).all().double()
