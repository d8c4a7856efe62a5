"""What a dynaspec proposer inside vLLM is configured by: vLLM's own config, and a few
environment variables (vLLM hands a custom proposer nothing else; its worker processes
inherit the environment of the process that starts the engine)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynaspec.core.config import SpecConfig
from dynaspec.errors import ConfigError, UnsupportedOptionError
from dynaspec.policies import SCHEDULES

ENV_PREFIX = "DYNASPEC_VLLM_"


@dataclass(frozen=True)
class ProposerSettings:
    """A proposer's configuration (docs/vllm.md, "Settings")."""

    num_speculative_tokens: int  # vLLM's K: the most tokens proposed per request and step
    eos_token_ids: tuple[int, ...] = ()  # copies end before these
    vocab_size: int = 0  # the target's vocabulary (logit rows)
    max_num_seqs: int = 256  # vLLM's most requests per step
    schedule: str = "adaptive"  # DYNASPEC_VLLM_SCHEDULE: a name in dynaspec.policies.SCHEDULES
    ngram: int = 3  # DYNASPEC_VLLM_NGRAM: longest n-gram the lookup matches (down to 1)
    draft: str | None = None  # DYNASPEC_VLLM_DRAFT: the draft model (a preset, folder or id)
    draft_dtype: str | None = None  # DYNASPEC_VLLM_DRAFT_DTYPE: its dtype (None: dynaspec's)
    confidence_threshold: float = 0.4  # DYNASPEC_VLLM_CONFIDENCE: the `dynamic` schedule's
    # DYNASPEC_VLLM_SUFFIX_CACHE: MB of a suffix cache over every request this vLLM process
    # has seen (one scope: vLLM tells a proposer no user or key); 0: off
    suffix_cache_mb: float = 0.0
    # DYNASPEC_VLLM_SEED_MODE: what a request's seed means; only vLLM's own ("stream"):
    # vLLM verifies the drafts with its rejection sampler, so "keyed" is refused
    seed_mode: str = "stream"

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ConfigError(
                "num_speculative_tokens must be >= 1 in speculative_config, got "
                f"{self.num_speculative_tokens}"
            )
        if self.schedule not in SCHEDULES or self.schedule == "heuristic_transient":
            raise ConfigError(
                f"{ENV_PREFIX}SCHEDULE={self.schedule!r} is not a schedule; set it to one of "
                "adaptive, dynamic, heuristic, constant"
            )
        if self.ngram < 1:
            raise ConfigError(f"{ENV_PREFIX}NGRAM must be an int >= 1, got {self.ngram}")
        if not self.suffix_cache_mb >= 0:
            raise ConfigError(
                f"{ENV_PREFIX}SUFFIX_CACHE must be a size in MB >= 0 (0: off), got "
                f"{self.suffix_cache_mb}"
            )
        check_seed_mode(self.seed_mode)

    @property
    def spec(self) -> SpecConfig:
        """The per-request policy's configuration, in dynaspec's (transformers') words."""
        return SpecConfig(
            num_assistant_tokens=self.num_speculative_tokens,
            assistant_confidence_threshold=self.confidence_threshold,
            num_assistant_tokens_schedule=self.schedule,
        )

    @classmethod
    def from_vllm(
        cls, vllm_config: Any, environ: Mapping[str, str] | None = None
    ) -> ProposerSettings:
        """Reads vLLM's `VllmConfig` (by attribute: vLLM itself is not imported) and the
        DYNASPEC_VLLM_* variables of `environ` (default: the process's)."""
        env = os.environ if environ is None else environ
        spec = vllm_config.speculative_config
        model = getattr(vllm_config, "model_config", None)
        hf_config = getattr(model, "hf_config", None)
        scheduler = getattr(vllm_config, "scheduler_config", None)
        return cls(
            num_speculative_tokens=int(spec.num_speculative_tokens),
            eos_token_ids=_ids(getattr(hf_config, "eos_token_id", None)),
            vocab_size=int(getattr(hf_config, "vocab_size", 0) or 0),
            max_num_seqs=int(getattr(scheduler, "max_num_seqs", 256) or 256),
            schedule=env.get(ENV_PREFIX + "SCHEDULE", "adaptive"),
            ngram=_int(env, "NGRAM", 3),
            draft=env.get(ENV_PREFIX + "DRAFT") or None,
            draft_dtype=env.get(ENV_PREFIX + "DRAFT_DTYPE") or None,
            confidence_threshold=_float(env, "CONFIDENCE", 0.4),
            suffix_cache_mb=_float(env, "SUFFIX_CACHE", 0.0),
            seed_mode=env.get(ENV_PREFIX + "SEED_MODE", "stream"),
        )


def check_seed_mode(mode: str) -> None:
    """Refuses keyed seeds inside vLLM, naming the alternative. dynaspec's keyed seeds give
    the target alone's text for a seed whatever was drafted, because dynaspec verifies the
    drafts by coupling (core/keyed.py); inside vLLM, vLLM samples and verifies with its own
    rejection sampler, and a proposer only proposes tokens, so no proposer can make vLLM's
    seeded text the same whatever it drafts."""
    if mode == "keyed":
        raise UnsupportedOptionError(
            f"{ENV_PREFIX}SEED_MODE=keyed: inside vLLM, vLLM samples and verifies the drafts "
            "with its own rejection sampler, so a dynaspec proposer cannot make a seed give "
            "the same text whatever is drafted; for keyed seeds serve with `dynaspec serve` "
            f"(a request's seed is keyed there), or unset {ENV_PREFIX}SEED_MODE"
        )
    if mode != "stream":
        raise ConfigError(
            f"{ENV_PREFIX}SEED_MODE={mode!r}: the one mode inside vLLM is 'stream' (vLLM's "
            "seeded sampling); keyed seeds need `dynaspec serve`"
        )


def _ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, "a whole number")


def _float(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, "a number")


def _number(env: Mapping[str, str], name: str, default: Any, parse: Any, words: str) -> Any:
    """DYNASPEC_VLLM_<name> read with `parse`, or `default` when unset; ConfigError naming
    the variable and what to set it to."""
    text = env.get(ENV_PREFIX + name)
    if text is None:
        return default
    try:
        return parse(text)
    except ValueError:
        raise ConfigError(f"{ENV_PREFIX}{name}={text!r}: set it to {words}") from None
