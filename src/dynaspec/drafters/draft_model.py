"""A draft model as a draft source: it proposes tokens one forward at a time.

The draft's cache follows the same invariant as the target's (see docs/design/architecture.md):
it holds committed tokens only, and may lag behind after rounds without drafting; it then
catches up by being fed every committed token it has not seen in its first forward. A
guess (a lookup continuation, `DraftPlan.guess`) rides on that forward: its rows draft the
tokens that agree with it, and the guessed tokens after the first that does not (or after a
stop) are cropped at once, so the cache holds only tokens the draft drafted.

Waiting for the device: a stopper that decides after each token (`needs_confidence`) gets
the token, its confidence and the finite-logits check in one transfer per drafted token. Any
other drafts the whole plan without reading anything back, and the tokens, confidences and
checks come back in one transfer at the end; the stopper's `should_stop` and the EOS check
then run over them in order, and the proposal ends where they say (the draft may have run a
few forwards past that point; `crop` forgets them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from dynaspec.core.finite import all_finite, check_finite, require_finite
from dynaspec.core.protocols import ModelAdapter, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.timing import device_clock


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
        catchup = self.catchup(tokens.numel())
        return DraftOptions(catchup=catchup, started=self.model.num_cached > 0)

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
        guess: torch.Tensor | None = None,
        checked: int = 0,
    ) -> Proposal:
        """Up to `lookahead` tokens after `tokens` (committed, then any tokens another source
        proposed this round: `first_index` of them, which offsets the DraftStep index the
        stopper sees). `guess` (g,): tokens the draft may well draft next (a lookup
        continuation); they are fed with the first forward, and its rows draft as many
        tokens as agree with them, each as its own forward would (the proposal is the same
        as without a guess, its forwards fewer). The first `checked` guessed tokens are a
        copy the draft checks: while it drafts them, the stopper is not asked (the EOS
        check is), so the draft runs on through the copy as far as it agrees with it."""
        per_token = stopper.needs_confidence
        pending = tokens[self.model.num_cached :]  # tokens the draft has not seen: >= newest
        catchup = pending.numel()
        guess = tokens.new_empty(0) if guess is None else guess[: max(lookahead - 1, 0)]
        guess_fed = guess.numel()
        run = _Run()
        started = device_clock(self.device)
        while len(run.drafted) < lookahead and run.stop_reason is None:
            rows = self.model.forward(torch.cat([pending, guess]), 1 + guess.numel())  # (1+g, V)
            run.forwards += 1
            for row, logits in enumerate(rows):
                token = self._next(logits, tokens, run, sampler, guessed=row > 0)
                agrees = row < guess.numel() and int(token) == int(guess[row])
                # the rows before it agreed too: drafting parts from the guess at the first
                # that does not
                if agrees and row < checked:
                    run.held = row + 1
                if per_token:  # one transfer: the token, its confidence and the check
                    self._ask(run, first_index, tokens, stopper, eos_token_ids)
                if row == guess.numel():
                    break
                if run.stop_reason is not None or not agrees:
                    # Drafting stops, or parts from the guess, at token `row`: the cache
                    # keeps the guessed tokens drafted before it, as if fed one by one.
                    self.model.crop(self.model.num_cached - (guess.numel() - row))
                    break
            pending, guess = token.view(1), guess[:0]
        if not per_token and run.drafted:  # one transfer for the whole draft, then the stopper
            for _ in run.drafted:
                self._ask(run, first_index, tokens, stopper, eos_token_ids)
                if run.stop_reason is not None:
                    break
        kept = len(run.steps)
        # (k,) tokens and (k, V) rows on the committed tokens' (target's) device, wherever
        # the draft runs.
        return Proposal(
            tokens=torch.stack(run.drafted[:kept]).to(tokens.device) if kept else tokens[:0],
            probs=torch.stack(run.rows[:kept]).to(tokens.device) if run.rows else None,
            confidences=tuple(step.confidence for step in run.steps),
            stop_reason=run.stop_reason or StopReason.MAX,
            draft_time_s=device_clock(self.device) - started,
            draft_forwards=run.forwards,
            catchup=catchup,
            guess_fed=guess_fed,
            guess_hits=sum(run.guessed[:kept]),
        )

    def _next(
        self,
        logits: torch.Tensor,
        tokens: torch.Tensor,
        run: _Run,
        sampler: TokenSampler,
        guessed: bool,
    ) -> torch.Tensor:
        """Samples (or picks) the next draft token from a row of (V,) logits; 0-dim."""
        if sampler.processors and logits.device != tokens.device:
            # transformers' processors hold tensors on the target's device: a draft on
            # another device is processed, and samples, there.
            logits = logits.to(tokens.device)
        try:
            token, probs = sampler.next_draft(logits, tokens, run.drafted)
        except RuntimeError:  # torch.multinomial refuses NaN/inf probabilities
            require_finite(logits, self.model)
            raise
        run.drafted.append(token)
        run.guessed.append(guessed)
        if sampler.config.do_sample:  # only speculative sampling needs the rows
            run.rows.append(probs)
        run.checks.append(torch.stack([token.double(), probs[token].double(), _finite(logits)]))
        return token

    def _ask(
        self,
        run: _Run,
        first_index: int,
        tokens: torch.Tensor,
        stopper: Stopper,
        eos_token_ids: tuple[int, ...],
    ) -> None:
        """The stopper's (and the EOS check's) word on the next drafted token not asked yet."""
        index = len(run.steps)
        asked = stopper if index >= run.held else None  # a checked copy's token: not asked
        step, reason = self._step(
            run.checks[index].tolist(), index, first_index, tokens, asked, eos_token_ids
        )
        run.steps.append(step)
        run.stop_reason = reason

    def _step(
        self,
        values: list[float],
        index: int,
        first_index: int,
        tokens: torch.Tensor,
        stopper: Stopper | None,
        eos_token_ids: tuple[int, ...],
    ) -> tuple[DraftStep, StopReason | None]:
        """The DraftStep of the `index`-th drafted token (host values; `first_index` tokens
        another source proposed come before it), and why drafting stops there (None: on;
        `stopper` None: only an EOS stops it)."""
        token, confidence, finite = values
        check_finite(finite == 1.0, self.model)
        step = DraftStep(first_index + index, tokens.numel() + index, int(token), confidence)
        if step.token in eos_token_ids:
            return step, StopReason.EOS
        if stopper is not None and stopper.should_stop(step):
            return step, stopper.reason
        return step, None

    def crop(self, num_committed: int) -> None:
        self.model.crop(min(self.model.num_cached, num_committed))


@dataclass
class _Run:
    """What one call of `ModelDrafter.draft` has drafted so far."""

    forwards: int = 0  # draft forwards run
    drafted: list[torch.Tensor] = field(default_factory=list)  # 0-dim token ids
    guessed: list[bool] = field(default_factory=list)  # per token: drafted in a guessed row
    held: int = 0  # the first tokens, drafted as a checked copy's, that the stopper is not asked
    rows: list[torch.Tensor] = field(default_factory=list)  # (V,) distributions, sampling only
    checks: list[torch.Tensor] = field(default_factory=list)  # (token, confidence, finite)
    steps: list[DraftStep] = field(default_factory=list)  # the tokens the stopper has seen
    stop_reason: StopReason | None = None  # why drafting stops (None: on)


def _finite(logits: torch.Tensor) -> torch.Tensor:
    """1.0 when every logit is finite, else 0.0 (float64, on the device: no wait)."""
    return all_finite(logits).double()
