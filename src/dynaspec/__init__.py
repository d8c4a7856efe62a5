"""dynaspec: lossless speculative decoding with a per-round (dynamic) lookahead.

The public API: `generate`, `load_pair`, `load_model`, the policies, `GenerateOutput` and the
typed errors. The layers underneath are described in docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynaspec.core.config import LimitsConfig, SamplingConfig, SpecConfig
from dynaspec.core.round import Round, StopReason
from dynaspec.core.stats import GenerationStats, RoundRecord, Summary
from dynaspec.errors import DynaspecError
from dynaspec.generation import GenerateOutput, GenerationKwargs, generate
from dynaspec.policies import (
    AdaptivePolicy,
    ConstantPolicy,
    DynamicPolicy,
    HeuristicPolicy,
    LookaheadPolicy,
    OraclePolicy,
    make_policy,
)

if TYPE_CHECKING:
    from dynaspec.models.loading import ModelPair, load_model, load_pair

__version__ = "0.1.0"

__all__ = [
    "AdaptivePolicy",
    "ConstantPolicy",
    "DynamicPolicy",
    "DynaspecError",
    "GenerateOutput",
    "GenerationKwargs",
    "GenerationStats",
    "HeuristicPolicy",
    "LimitsConfig",
    "ModelPair",
    "LookaheadPolicy",
    "OraclePolicy",
    "Round",
    "RoundRecord",
    "SamplingConfig",
    "SpecConfig",
    "StopReason",
    "Summary",
    "generate",
    "load_model",
    "load_pair",
    "make_policy",
]

_LAZY = {"load_model", "load_pair", "ModelPair"}


def __getattr__(name: str) -> Any:
    # Loading pulls in the GGUF reader and the model cache; import it only when asked for.
    if name in _LAZY:
        from dynaspec.models import loading

        return getattr(loading, name)
    raise AttributeError(f"module 'dynaspec' has no attribute {name!r}")
