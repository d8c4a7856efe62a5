"""A draft model as a draft source: it proposes tokens one forward at a time.

The draft's cache follows the same invariant as the target's (see docs/architecture.md):
it holds committed tokens only, and may lag behind after rounds without drafting; it then
catches up by being fed every committed token it has not seen in its first forward.
"""

from __future__ import annotations

from time import perf_counter

import torch

from dynaspec.core.protocols import DraftStep, LookaheadPolicy, ModelAdapter, Proposal
from dynaspec.core.sampling import TokenSampler


class ModelDrafter:
    """Drafts with a `ModelAdapter`, asking the policy after each token whether to stop."""

    def __init__(self, model: ModelAdapter) -> None:
        self.model = model

    def begin(self, input_ids: torch.Tensor) -> None:
        self.model.begin(input_ids)

    def catchup(self, num_committed: int) -> int:
        return num_committed - self.model.num_cached

    def propose(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        policy: LookaheadPolicy,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        pending = tokens[self.model.num_cached :]  # tokens the draft has not seen: >= newest
        catchup = pending.numel()
        drafted: list[torch.Tensor] = []
        rows: list[torch.Tensor] = []
        confidences: list[float] = []
        stop_reason = "max"
        draft_time = 0.0
        for index in range(lookahead):
            start = perf_counter()
            logits = self.model.forward(pending, 1)[0]  # (V,)
            draft_time += perf_counter() - start
            if sampler.processors and logits.device != tokens.device:
                # transformers' processors hold tensors on the target's device: a draft on
                # another device is processed, and samples, there.
                logits = logits.to(tokens.device)
            # Processed with the committed tokens + this round's drafts as the prefix.
            scores = sampler.process(logits[None], tokens, drafted)[0]  # (V,)
            probs = sampler.normalize(scores[None])[0]  # (V,)
            token = sampler.pick(scores, probs)
            drafted.append(token)
            if sampler.config.do_sample:  # only speculative sampling needs the rows
                rows.append(probs)
            confidences.append(float(probs[token]))
            step = DraftStep(index, tokens.numel() + index, int(token), confidences[-1])
            if step.token in eos_token_ids:
                stop_reason = "eos"
                break
            if policy.should_stop(step):
                stop_reason = policy.stop_reason
                break
            pending = token.view(1)
        # (k,) tokens and (k, V) rows on the committed tokens' (target's) device, wherever
        # the draft runs.
        return Proposal(
            tokens=torch.stack(drafted).to(tokens.device) if drafted else tokens.new_empty(0),
            probs=torch.stack(rows).to(tokens.device) if rows else None,  # (k, V)
            confidences=tuple(confidences),
            stop_reason=stop_reason,
            draft_time_s=draft_time,
            forwards=len(drafted),
            catchup=catchup,
        )

    def crop(self, num_committed: int) -> None:
        self.model.crop(min(self.model.num_cached, num_committed))
