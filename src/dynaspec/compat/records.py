"""The frozen records of transformers' generation keywords: one field per keyword of
compat/keywords.py's table (settings.py fills them from the call and the checkpoint)."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from typing import Any

from dynaspec.compat.keywords import WARPERS, BuildContext, build_stage, keyword_record
from dynaspec.core.keyed import SEED_MODES
from dynaspec.errors import ConfigError


@dataclass(frozen=True)
class SamplingConfig(keyword_record("SamplingKeywords", "sampling")):
    """How the next token is chosen from a distribution; applied alike to draft and target.

    do_sample (False: greedy, the argmax; True: sample from the processed probabilities),
    temperature and the warpers, one field per sampling keyword of compat/keywords.py (None:
    off), then the seed (None: nondeterministic) and what it means.
    """

    # seeds sampling (None: nondeterministic); a batch's: one int for all rows (see for_row)
    # or a tuple of one seed per row
    seed: int | tuple[int, ...] | None = None
    # What the seed means (core/keyed.py): "keyed", noise keyed by (seed, position, token)
    # and verification by coupling (the output is the target alone's with that seed, for
    # any draft); "stream", a seeded generator and rejection sampling. generate() and the
    # server default to "keyed"; a record made directly, to "stream".
    seed_mode: str = "stream"

    def for_row(self, index: int, rows: int = 1) -> SamplingConfig:
        """The sampling of row `index` of `rows`: its own seed. A tuple: its entry. An int,
        "keyed": seed + index (row r samples as generate() of that row alone with
        seed + r); "stream": row 0 the seed itself, row i a seed mixed from it (no two rows
        share a random stream)."""
        seed = self.seed
        if isinstance(seed, tuple):
            if len(seed) != rows:
                raise ConfigError(
                    f"seed= lists {len(seed)} seeds, one per row, for {rows} rows: pass "
                    f"{rows} seeds, or one int (row r then samples with seed + r)"
                )
            return replace(self, seed=seed[index])
        if seed is None or index == 0:
            return self
        if self.seed_mode == "keyed":
            return replace(self, seed=seed + index)
        mixed = zlib.crc32(f"{seed}:row{index}".encode()) ^ (seed << 32)
        return replace(self, seed=mixed & (2**63 - 1))

    def __post_init__(self) -> None:
        if isinstance(self.seed, list):
            object.__setattr__(self, "seed", tuple(self.seed))
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
