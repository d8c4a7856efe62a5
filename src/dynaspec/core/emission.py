"""Per emitted token: the stopping criteria, and the score and logit rows to return.

Stopping criteria are checked at every emitted token, as if the tokens had come one at a
time, so generation ends exactly where they trigger, even inside an accepted draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import torch
from transformers.generation.stopping_criteria import StoppingCriteria


class Outputs(Protocol):
    """What a call returns beside its tokens (compat/records.py's OutputConfig)."""

    output_scores: bool | None  # one (1, V) processed-score row per new token
    output_logits: bool | None  # one (1, V) raw-logit row per new token


def _triggered(criterion: Any, prefix: torch.Tensor, scores: Any) -> bool:
    return bool(torch.as_tensor(criterion(prefix, scores)).any())


class Emission:
    """Per emitted token: the stopping criteria, and the scores/logits rows to return.

    `emit` is called once per round with the new tokens (already cut at EOS and length); it
    cuts them after the first token at which a criterion triggers and records one (1, V) row
    of processed scores and of raw logits per token kept, as transformers' generate returns.
    """

    def __init__(self, criteria: Sequence[StoppingCriteria | Any], outputs: Outputs) -> None:
        self.criteria = list(criteria)
        self.outputs = outputs
        self.scores: tuple[torch.Tensor, ...] = ()
        self.logits: tuple[torch.Tensor, ...] = ()

    @classmethod
    def needed(cls, criteria: Sequence[Any], outputs: Outputs) -> Emission | None:
        """An Emission when there is something to check or collect, else None (fast path)."""
        if criteria or outputs.output_scores or outputs.output_logits:
            return cls(criteria, outputs)
        return None

    def emit(
        self,
        tokens: torch.Tensor,
        new_tokens: torch.Tensor,
        scores: torch.Tensor,
        logits: torch.Tensor,
    ) -> tuple[torch.Tensor, bool]:
        """tokens: (L,) committed before the round; new_tokens: (m,); scores/logits: rows
        0..m-1 chose new_tokens[0..m-1]. Returns (the tokens kept, whether a criterion hit)."""
        count = new_tokens.numel()
        rows = tuple(scores[i : i + 1].float() for i in range(count))
        stopped = False
        if self.criteria:
            sequence = torch.cat([tokens, new_tokens])[None]  # (1, L + m)
            for index in range(count):
                so_far = self.scores + rows[: index + 1] if self.outputs.output_scores else None
                prefix = sequence[:, : tokens.numel() + index + 1]
                if any(_triggered(criterion, prefix, so_far) for criterion in self.criteria):
                    count, stopped = index + 1, True
                    break
        if self.outputs.output_scores:
            self.scores += rows[:count]
        if self.outputs.output_logits:
            self.logits += tuple(logits[i : i + 1].float() for i in range(count))
        return new_tokens[:count], stopped

    def results(self) -> tuple[tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """(scores, logits) as GenerateOutput carries them: None where not asked for."""
        return (
            self.scores if self.outputs.output_scores else None,
            self.logits if self.outputs.output_logits else None,
        )
