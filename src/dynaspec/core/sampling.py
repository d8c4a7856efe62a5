"""Logits -> processed scores and probabilities, and picking a token from them.

The same processing (transformers' own logits processors and warpers, in transformers'
order: see compat/processing.py) is applied to draft and target, each row with the sequence
of its own position, which speculative sampling requires for the output to follow the
target's processed distribution exactly. With no processors the logits pass through as they
are (the fast path of plain greedy decoding).

With a seed, by default (`seed_mode="keyed"`), a token is not drawn from a stream but chosen
by noise keyed by (seed, position, token id) (core/keyed.py): the Gumbel-max trick, the same
for the draft's proposal and the target's check, so the target's token at a position depends
only on the seed and the prefix. Otherwise (no seed, or `seed_mode="stream"`), random draws
come from one seeded generator per device: a draw on a tensor uses the
generator on that tensor's device, so the draft samples on its own device and the
verification's uniforms and tokens come from the target's. With both models on one device
they share one stream; on two devices the second stream is seeded from `seed` and the
device's name, so the two never repeat each other's draws.
"""

from __future__ import annotations

import copy
import zlib
from collections.abc import Sequence
from typing import Any, Protocol

import torch
from transformers.generation.logits_process import LogitsProcessor

from dynaspec.core.keyed import NoiseRows, keyed_tokens
from dynaspec.core.scores import apply_processors
from dynaspec.core.verify import argmax
from dynaspec.errors import NumericalError


class SamplingRule(Protocol):
    """What the sampler reads of a sampling record (compat/records.py's SamplingConfig)."""

    do_sample: bool  # False: the argmax of the processed scores; True: a draw from them
    seed: int | None  # seeds the sampling generator; None: nondeterministic
    seed_mode: str  # "keyed": keyed noise and verification by coupling; "stream": a generator

    def warpers(self) -> list[Any]:
        """The sampling warpers, in transformers' order (none when greedy)."""
        ...


class TokenSampler:
    """Turns logits into the distribution a token is drawn from, and draws it."""

    def __init__(
        self,
        config: SamplingRule,
        device: torch.device | str = "cpu",
        processors: Sequence[LogitsProcessor] | None = None,
        offset: int = 0,
    ) -> None:
        self.config = config
        # Left padding before the sequence's first token (a batch row's): keyed positions
        # count the sequence's own tokens, so a row draws as it would alone.
        self.offset = offset
        self._noise: NoiseRows | None = None  # keyed noise rows made so far (by position)
        # The device whose generator is seeded with `seed` itself (the target's).
        self.home = _canonical(device)
        # Every processor and warper in transformers' order (None: the config's warpers only).
        # Called directly, not through LogitsProcessorList (which inspects signatures per call).
        self.processors = list(config.warpers() if processors is None else processors)
        self._generators: dict[torch.device, torch.Generator] = {}

    def process(
        self,
        logits: torch.Tensor,
        tokens: torch.Tensor | None = None,
        drafted: torch.Tensor | Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """(n, V) logits -> (n, V) processed scores; row i sees `tokens` (the committed
        sequence) plus drafted[: len(drafted) - n + 1 + i] (see scores.apply_processors).
        With no processors the logits come back unchanged."""
        if not self.processors:
            return logits
        return apply_processors(self.processors, logits, tokens, drafted)

    def normalize(self, scores: torch.Tensor) -> torch.Tensor:
        """(n, V) processed scores -> (n, V) float32 probabilities."""
        return torch.softmax(scores.float(), dim=-1)

    def probs(
        self,
        logits: torch.Tensor,
        tokens: torch.Tensor | None = None,
        drafted: torch.Tensor | Sequence[torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """(n, V) logits -> (n, V) float32 probabilities after every processor."""
        return self.normalize(self.process(logits, tokens, drafted))

    def pick(self, scores: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """One token (0-dim LongTensor) from a (V,) row: argmax of the processed scores (as
        transformers' greedy decoding), or a sample from probs."""
        if not self.config.do_sample:
            return argmax(scores)
        return self.sample(probs)

    def next_draft(
        self,
        logits: torch.Tensor,
        tokens: torch.Tensor,
        drafted: Sequence[torch.Tensor],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A draft model's next token from its (V,) logits, processed with the committed
        `tokens` and this round's `drafted` ones as the prefix: (token 0-dim, probs (V,))."""
        scores = self.process(logits[None], tokens, drafted)[0]  # (V,)
        probs = self.normalize(scores[None])[0]  # (V,)
        if self.keyed_seed is not None:  # the same keys the target's check uses
            return self.keyed(scores[None], tokens.numel() + len(drafted))[0], probs
        return self.pick(scores, probs), probs

    def unpadded(self) -> TokenSampler:
        """This sampler for the sequence's tokens without their left padding (offset 0): a
        drafter that sees a batch row as it would alone. It shares the processors, streams
        and noise rows (keyed by the same absolute positions)."""
        if not self.offset:
            return self
        twin = copy.copy(self)
        twin.offset = 0
        return twin

    @property
    def keyed_seed(self) -> int | None:
        """The seed of keyed sampling (verification by coupling); None: not keyed (greedy,
        no seed, or seed_mode "stream")."""
        config = self.config
        if not config.do_sample or config.seed is None:
            return None
        return config.seed if getattr(config, "seed_mode", "keyed") == "keyed" else None

    def keyed(self, scores: torch.Tensor, length: int) -> torch.Tensor:
        """(n,) keyed samples from (n, V) processed scores, row i the token after the first
        `length` + i tokens of the (padded) sequence (core/keyed.py)."""
        seed = self.keyed_seed
        assert seed is not None, "keyed() needs do_sample, a seed and seed_mode 'keyed'"
        best = scores.amax(-1)  # (n,) NaN, +inf, or -inf when every token is masked
        if not bool(torch.isfinite(best).all()):
            raise NumericalError(self._bad_distribution())
        if self._noise is None or self._noise.seed != seed:
            self._noise = NoiseRows(seed)
        return keyed_tokens(scores, seed, length - self.offset, self._noise)

    def uniform(self, n: int, device: torch.device | str) -> torch.Tensor:
        """(n,) uniform draws in [0, 1) on `device`, from that device's generator."""
        return torch.rand(n, generator=self.generator(device), device=device)

    def sample(self, probs: torch.Tensor) -> torch.Tensor:
        """One token (0-dim LongTensor) drawn from a (V,) distribution, on its device."""
        try:
            return torch.multinomial(probs, 1, generator=self.generator(probs.device))[0]
        except RuntimeError as error:  # NaN, inf or negative: the processed scores were
            raise NumericalError(self._bad_distribution()) from error

    def _bad_distribution(self) -> str:
        """The message of a NumericalError for a distribution that cannot be sampled."""
        names = ", ".join(type(p).__name__ for p in self.processors) or "none"
        return (
            "the distribution to sample from holds NaN, inf or negative values after "
            f"the processors ({names}): check their values (a NaN or +inf bias, "
            "penalty or factor), or the weights and dtype"
        )

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
