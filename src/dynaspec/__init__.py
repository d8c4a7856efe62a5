"""dynaspec: lossless speculative decoding with a per-round (dynamic) lookahead."""

from dynaspec.config import LimitsConfig, SamplingConfig, SpecConfig
from dynaspec.decoding import GenerateOutput, generate
from dynaspec.errors import DynaspecError
from dynaspec.policies import (
    ConstantPolicy,
    DynamicPolicy,
    HeuristicPolicy,
    LookaheadPolicy,
    OraclePolicy,
    make_policy,
)
from dynaspec.stats import GenerationStats, RoundRecord, Summary

__version__ = "0.1.0"

__all__ = [
    "ConstantPolicy",
    "DynamicPolicy",
    "DynaspecError",
    "GenerateOutput",
    "GenerationStats",
    "HeuristicPolicy",
    "LimitsConfig",
    "LookaheadPolicy",
    "OraclePolicy",
    "RoundRecord",
    "SamplingConfig",
    "SpecConfig",
    "Summary",
    "generate",
    "make_policy",
]
