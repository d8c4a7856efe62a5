"""The frozen records of transformers' generation keywords: one field per keyword of
compat/keywords.py's table (settings.py fills them from the call and the checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynaspec.compat.keywords import WARPERS, BuildContext, build_stage, keyword_record
from dynaspec.core.keyed import SEED_MODES
from dynaspec.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig(keyword_record("SamplingKeywords", "sampling")):
    """How the next token is chosen from a distribution; applied alike to draft and target.

    do_sample (False: greedy, the argmax; True: sample from the processed probabilities),
    temperature and the warpers, one field per sampling keyword of compat/keywords.py (None:
    off), then the seed of the sampling generator (None: nondeterministic).
    """

    seed: int | None = None  # seeds sampling; None: nondeterministic
    # What the seed means (core/keyed.py): "keyed", noise keyed by (seed, position, token)
    # and verification by coupling (the output is the target alone's with that seed, for
    # any draft); "stream", a seeded generator and rejection sampling
    seed_mode: str = "keyed"

    def __post_init__(self) -> None:
        if self.seed_mode not in SEED_MODES:
            raise ConfigError(
                f"seed_mode must be one of {', '.join(map(repr, SEED_MODES))}, "
                f"got {self.seed_mode!r}"
            )
        if self.do_sample and not self.temperature > 0.0:
            raise ConfigError(
                f"temperature must be > 0 when sampling, got {self.temperature}; "
                "use do_sample=False for greedy decoding"
            )
        if self.top_k is not None and self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0 (0 or None keeps all), got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top_p must lie in (0, 1], got {self.top_p}")
        for name in ("min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h"):
            value = getattr(self, name)
            if value is not None and not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must lie in [0, 1], got {value}")

    def warpers(self) -> list[Any]:
        """The sampling warpers, in transformers' order and conditions (none when greedy):
        what core/sampling.py's TokenSampler applies when given no processor list."""
        if not self.do_sample:
            return []
        return build_stage(WARPERS, BuildContext(self))


@dataclass(frozen=True)
class ProcessorConfig(keyword_record("ProcessorKeywords", "processors")):
    """transformers' logits processors, by their generate() names and with their meaning: one
    field per processor keyword of compat/keywords.py.

    None (or the neutral value) leaves a processor out. Values are handed to transformers'
    own classes as given; an invalid one raises ConfigError naming the keyword.
    """


@dataclass(frozen=True)
class OutputConfig(keyword_record("OutputKeywords", "outputs")):
    """What generate() returns beside the sequences (output_scores: one (1, V) processed-score
    row per new token; output_logits: one (1, V) raw-logit row per new token)."""
