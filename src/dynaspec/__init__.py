"""dynaspec: lossless speculative decoding with a per-round (dynamic) lookahead.

The public API: `generate`, `load_pair`, `load_model`, the policies, `GenerateOutput` and the
typed errors. The layers underneath are described in docs/design/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dynaspec.errors import DynaspecError

if TYPE_CHECKING:
    from dynaspec.compat.records import SamplingConfig
    from dynaspec.core.config import LimitsConfig, SpecConfig
    from dynaspec.core.round import Round, StopReason
    from dynaspec.core.stats import GenerationStats, RoundRecord, Summary
    from dynaspec.drafters.suffix_cache import SuffixCache
    from dynaspec.generation import GenerateOutput, GenerationKwargs, generate
    from dynaspec.models.loading import ModelPair, load_model, load_pair
    from dynaspec.policies import (
        AdaptivePolicy,
        ConstantPolicy,
        DynamicPolicy,
        HeuristicPolicy,
        LookaheadPolicy,
        OraclePolicy,
        make_policy,
    )

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
    "SuffixCache",
    "Summary",
    "generate",
    "load_model",
    "load_pair",
    "make_policy",
]

# Each public name and the module that defines it, imported on first use: `import dynaspec`
# (and the `dynaspec` command, which Ctrl-C may interrupt while it starts) loads neither torch
# nor transformers until a name that needs them is asked for.
_LAZY = {
    **dict.fromkeys(("LimitsConfig", "SpecConfig"), "dynaspec.core.config"),
    "SamplingConfig": "dynaspec.compat.records",
    "SuffixCache": "dynaspec.drafters.suffix_cache",
    **dict.fromkeys(("Round", "StopReason"), "dynaspec.core.round"),
    **dict.fromkeys(("GenerationStats", "RoundRecord", "Summary"), "dynaspec.core.stats"),
    **dict.fromkeys(("GenerateOutput", "GenerationKwargs", "generate"), "dynaspec.generation"),
    **dict.fromkeys(("ModelPair", "load_model", "load_pair"), "dynaspec.models.loading"),
    **dict.fromkeys(
        (
            "AdaptivePolicy",
            "ConstantPolicy",
            "DynamicPolicy",
            "HeuristicPolicy",
            "LookaheadPolicy",
            "OraclePolicy",
            "make_policy",
        ),
        "dynaspec.policies",
    ),
}
_SUBPACKAGES = {
    "backends",
    "cli",
    "compat",
    "core",
    "drafters",
    "eval",
    "generation",
    "models",
    "policies",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:  # `import dynaspec; dynaspec.core...` as before
        return importlib.import_module(f"dynaspec.{name}")
    raise AttributeError(f"module 'dynaspec' has no attribute {name!r}")
