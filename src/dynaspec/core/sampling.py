"""Logits -> processed probabilities, and picking a token from them.

The same processing (temperature, then top-k, then top-p, in transformers' order and with
transformers' own warpers) is applied to draft and target, which speculative sampling
requires for the output to follow the target's processed distribution exactly.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    LogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from dynaspec.core.config import SamplingConfig


class TokenSampler:
    """Turns logits into the distribution a token is drawn from, and draws it."""

    def __init__(self, config: SamplingConfig, device: torch.device | str = "cpu") -> None:
        self.config = config
        # Called directly, not through LogitsProcessorList (which inspects signatures per call).
        self.warpers: list[LogitsProcessor] = []
        if config.do_sample:
            if config.temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(config.temperature))
            if config.top_k:
                self.warpers.append(TopKLogitsWarper(config.top_k))
            if config.top_p is not None and config.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(config.top_p))
        self.generator: torch.Generator | None = None
        if config.do_sample and config.seed is not None:
            self.generator = torch.Generator(device=device).manual_seed(config.seed)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(n, V) logits -> (n, V) float32 probabilities after temperature/top-k/top-p."""
        scores = logits.float()
        for warper in self.warpers:
            scores = warper(None, scores)  # warpers ignore input_ids
        return torch.softmax(scores, dim=-1)

    def pick(self, logits: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """One token (0-dim LongTensor) from a (V,) row: argmax of logits, or a sample."""
        if not self.config.do_sample:
            return logits.argmax(-1)
        return torch.multinomial(probs, 1, generator=self.generator)[0]

    def uniform(self, n: int, device: torch.device | str) -> torch.Tensor:
        """(n,) uniform draws in [0, 1) from this sampler's generator."""
        return torch.rand(n, generator=self.generator, device=device)

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """One token (0-dim LongTensor) drawn from a (V,) distribution."""
        return torch.multinomial(probs, 1, generator=self.generator)[0]
