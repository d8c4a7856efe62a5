"""Logits -> processed probabilities, and picking a token from them.

The same processing (temperature, then top-k, then top-p, in transformers' order and with
transformers' own warpers) is applied to draft and target, which speculative sampling
requires for the output to follow the target's processed distribution exactly.

Random draws come from one seeded generator per device: a draw on a tensor uses the
generator on that tensor's device, so the draft samples on its own device and the
verification's uniforms and tokens come from the target's. With both models on one device
they share one stream; on two devices the second stream is seeded from `seed` and the
device's name, so the two never repeat each other's draws.
"""

from __future__ import annotations

import zlib

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
        # The device whose generator is seeded with `seed` itself (the target's).
        self.home = _canonical(device)
        # Called directly, not through LogitsProcessorList (which inspects signatures per call).
        self.warpers: list[LogitsProcessor] = []
        if config.do_sample:
            if config.temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(config.temperature))
            if config.top_k:
                self.warpers.append(TopKLogitsWarper(config.top_k))
            if config.top_p is not None and config.top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(config.top_p))
        self._generators: dict[torch.device, torch.Generator] = {}

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
        return self.sample(probs)

    def uniform(self, n: int, device: torch.device | str) -> torch.Tensor:
        """(n,) uniform draws in [0, 1) on `device`, from that device's generator."""
        return torch.rand(n, generator=self.generator(device), device=device)

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """One token (0-dim LongTensor) drawn from a (V,) distribution, on its device."""
        return torch.multinomial(probs, 1, generator=self.generator(probs.device))[0]

    def generator(self, device: torch.device | str) -> torch.Generator | None:
        """The seeded generator on `device` (made on first use); None when not seeded."""
        if not self.config.do_sample or self.config.seed is None:
            return None
        device = _canonical(device)
        generator = self._generators.get(device)
        if generator is None:
            seed = self.config.seed
            if device != self.home:  # another stream: never the home device's draws again
                seed = (zlib.crc32(f"{seed}:{device}".encode()) ^ (seed << 32)) & (2**63 - 1)
            generator = torch.Generator(device=device).manual_seed(seed)
            self._generators[device] = generator
        return generator


def _canonical(device: torch.device | str) -> torch.device:
    """`device` with its index ("cuda" -> "cuda:0"), so one device has one generator."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
