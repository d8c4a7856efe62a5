"""A draft model of another vocabulary that proposes target tokens directly: token-level
intersection (TLI, Timor et al., ICML 2025).

The draft's context is kept as the string-level drafter keeps it (the committed target
tokens decoded, re-encoded with the draft's tokenizer, its cache cropped to what still
agrees: drafters/cross_tokenizer.py). What differs is how it drafts: at each step its logits
are restricted to the tokens both tokenizers share (`SharedVocabulary`) and laid out over the
target's ids, the sampler's processors run there (in target ids, with the committed target
tokens, as they run on the target's logits), and the token picked is a target token. Its
draft id is fed back to the draft for the next step. A proposal is therefore a sequence of
target tokens with the distribution each was drawn from, and speculative sampling over those
distributions keeps sampled output the target's own; greedy output is the target's own as
with any drafter. No text round trip per round: the proposal cannot fail to re-encode.

What it gives up: a target token the draft's tokenizer does not have (a long merge of one
side) is never proposed, and the draft must spell text the way the shared tokens do; the
target may split it otherwise, and then rejects.
"""

from __future__ import annotations

from typing import Any

import torch

from dynaspec.core.finite import all_finite, check_finite
from dynaspec.core.protocols import ModelAdapter, Stopper
from dynaspec.core.round import DraftStep, Proposal, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.timing import device_clock
from dynaspec.drafters.cross_tokenizer import CrossTokenizerDrafter
from dynaspec.drafters.shared_vocab import SharedVocabulary


class IntersectionDrafter(CrossTokenizerDrafter):
    """Drafts target tokens with a model of another vocabulary over the shared tokens."""

    def __init__(
        self,
        model: ModelAdapter,
        target_tokenizer: Any,
        draft_tokenizer: Any,
        shared: SharedVocabulary,
        draft_eos: tuple[int, ...] = (),
    ) -> None:
        super().__init__(model, target_tokenizer, draft_tokenizer, draft_eos)
        self.shared = shared.to(self.device)

    def draft(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
        first_index: int = 0,
    ) -> Proposal:
        """Up to `lookahead` target tokens after `tokens` (committed, then any tokens prompt
        lookup copied this round: `first_index` of them, which offsets the DraftStep index)."""
        started = device_clock(self.device)
        lookahead, pending = self._resume(tokens, lookahead)
        if lookahead <= 0:
            return Proposal(tokens.new_empty(0), None, (), draft_time_s=0.0)
        drafted, rows, steps, reason = self._draft_shared(
            pending, lookahead, tokens, stopper, sampler, eos_token_ids, first_index
        )
        kept = len(steps)
        return Proposal(
            tokens=torch.stack(drafted[:kept]) if kept else tokens.new_empty(0),  # (k,)
            probs=torch.stack(rows[:kept]) if rows and kept else None,  # (k, V_target)
            confidences=tuple(step.confidence for step in steps),
            stop_reason=reason,
            draft_time_s=device_clock(self.device) - started,
            draft_forwards=len(drafted),
            catchup=len(pending),
        )

    def _draft_shared(
        self,
        pending: list[int],
        lookahead: int,
        tokens: torch.Tensor,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
        first: int = 0,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[DraftStep], StopReason]:
        """Up to `lookahead` target tokens after `pending` (draft ids, fed first): each one's
        (0-dim) id, its (V_target,) distribution (sampling only), the DraftSteps the stopper
        kept, and why drafting stopped. Waits for the device as ModelDrafter does."""
        per_token = stopper.needs_confidence
        feed = torch.tensor(pending, dtype=torch.long, device=self.device)
        drafted: list[torch.Tensor] = []  # 0-dim target ids, on the committed tokens' device
        rows: list[torch.Tensor] = []
        checks: list[torch.Tensor] = []  # per token: (token, confidence, finite, draft id)
        steps: list[DraftStep] = []
        reason = StopReason.MAX
        for index in range(lookahead):
            logits = self.model.forward(feed, 1)[0][: self.rows]  # (V_draft,)
            scores = self.shared.scores(logits).to(tokens.device)  # (V_target,)
            token, probs = sampler.next_draft(scores, tokens, drafted)
            drafted.append(token)
            if sampler.config.do_sample:
                rows.append(probs)
            fed = self.shared.to_draft[token.to(self.shared.to_draft.device)]  # -1: none
            finite = all_finite(logits).double().to(tokens.device)
            values = [token.double(), probs[token].double(), finite, fed.double()]
            checks.append(torch.stack([v.to(tokens.device) for v in values]))
            feed = fed.clamp_min(0).view(1)
            if per_token:  # one transfer: the token, its confidence, the checks
                step, why = self._shared_step(checks[-1].tolist(), index, tokens, stopper,
                                              eos_token_ids, first)  # fmt: skip
                steps.append(step)
                if why is not None:
                    reason = why
                    break
        table = torch.stack(checks).tolist() if checks else []
        if not per_token:  # one transfer for the whole draft, then the rules
            for index, values in enumerate(table):
                step, why = self._shared_step(values, index, tokens, stopper, eos_token_ids, first)
                steps.append(step)
                if why is not None:
                    reason = why
                    break
        fed_ids = [max(int(values[3]), 0) for values in table]
        self.cached.extend(pending + fed_ids[:-1])  # the last drafted token was never fed
        return drafted, rows, steps, reason

    def _shared_step(
        self,
        values: list[float],
        index: int,
        tokens: torch.Tensor,
        stopper: Stopper,
        eos_token_ids: tuple[int, ...],
        first: int,
    ) -> tuple[DraftStep, StopReason | None]:
        """The DraftStep of the `index`-th drafted token (host values; its index in the round
        counts from `first`, the copied tokens before it), and why drafting stops there
        (None: on). A token the draft has no id for (only when the processors
        left no shared token possible) is proposed, and the draft stops after it."""
        token, confidence, finite, fed = values
        check_finite(finite == 1.0, self.model)
        step = DraftStep(first + index, tokens.numel() + index, int(token), confidence)
        if step.token in eos_token_ids:
            return step, StopReason.EOS
        if stopper.should_stop(step):
            return step, stopper.reason
        if fed < 0:
            return step, StopReason.MAX
        return step, None
