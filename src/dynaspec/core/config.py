"""Frozen configuration objects. Names follow transformers' assisted generation."""

from __future__ import annotations

from dataclasses import dataclass

from dynaspec.core.keywords import keyword_record
from dynaspec.errors import ConfigError

# The schedules accepted in `num_assistant_tokens_schedule` are those of
# dynaspec.policies.SCHEDULES (checked where the policy is made). The default: cost-aware,
# it drafts only while its measured costs say drafting pays. "dynamic" is the published
# confidence rule (Mamou et al. 2024), transformers' default.
DEFAULT_SCHEDULE = "adaptive"
# The most tokens one round may draft: far beyond where drafting pays (each drafted token is
# accepted with probability < 1), and the adaptive schedule weighs every length up to it.
MAX_ASSISTANT_TOKENS = 1024


@dataclass(frozen=True)
class SpecConfig:
    """How many tokens the draft proposes per round, and how that number is chosen."""

    num_assistant_tokens: int = 20  # most tokens drafted in one round (start value for heuristic)
    assistant_confidence_threshold: float = 0.4  # dynamic: stop drafting below this draft prob
    num_assistant_tokens_schedule: str = DEFAULT_SCHEDULE  # a name in policies.SCHEDULES

    def __post_init__(self) -> None:
        if isinstance(self.num_assistant_tokens, bool) or not isinstance(
            self.num_assistant_tokens, int
        ):
            raise ConfigError(
                f"num_assistant_tokens must be an int, got {self.num_assistant_tokens!r}"
            )
        if self.num_assistant_tokens < 1:
            raise ConfigError(
                f"num_assistant_tokens must be >= 1, got {self.num_assistant_tokens}; "
                "pass draft=None to decode with the target alone"
            )
        if self.num_assistant_tokens > MAX_ASSISTANT_TOKENS:
            too_many = f"{self.num_assistant_tokens} tokens per round is more than the most, "
            raise ConfigError(
                f"num_assistant_tokens: {too_many}{MAX_ASSISTANT_TOKENS}: pass at most that",
                cli_message=f"--num-assistant-tokens: {too_many}{MAX_ASSISTANT_TOKENS}: give "
                "at most that",
            )
        if not isinstance(self.num_assistant_tokens_schedule, str):
            raise ConfigError(
                "num_assistant_tokens_schedule must be a schedule's name (a str, e.g. "
                f'"adaptive"), got {self.num_assistant_tokens_schedule!r}'
            )
        threshold = self.assistant_confidence_threshold
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ConfigError(
                "assistant_confidence_threshold must be a number in [0, 1], got "
                f"{threshold!r}; 0 turns the confidence stop off"
            )
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(
                f"assistant_confidence_threshold must lie in [0, 1], got {threshold}; "
                "0 turns the confidence stop off"
            )


@dataclass(frozen=True)
class SamplingConfig(keyword_record("SamplingKeywords", "sampling")):
    """How the next token is chosen from a distribution; applied alike to draft and target.

    do_sample (False: greedy, the argmax; True: sample from the processed probabilities),
    temperature and the warpers, one field per sampling keyword of core/keywords.py (None:
    off), then the seed of the sampling generator (None: nondeterministic).
    """

    seed: int | None = None  # seeds the sampling generator; None: nondeterministic

    def __post_init__(self) -> None:
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


@dataclass(frozen=True)
class LimitsConfig:
    """When generation stops."""

    max_new_tokens: int = 128  # never emit more new tokens than this
    eos_token_ids: tuple[int, ...] = ()  # stop after emitting any of these (it is kept)
    max_time: float | None = None  # seconds; stop at the first token emitted after that
    stop_strings: tuple[str, ...] = ()  # stop after the token that completes one of these

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ConfigError(f"max_new_tokens must be an int, got {self.max_new_tokens!r}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_time is not None and not self.max_time >= 0:  # 0: one token, as there
            raise ConfigError(f"max_time must be >= 0 seconds, got {self.max_time}")


@dataclass(frozen=True)
class ProcessorConfig(keyword_record("ProcessorKeywords", "processors")):
    """transformers' logits processors, by their generate() names and with their meaning: one
    field per processor keyword of core/keywords.py.

    None (or the neutral value) leaves a processor out. Values are handed to transformers'
    own classes as given; an invalid one raises ConfigError naming the keyword.
    """


@dataclass(frozen=True)
class OutputConfig(keyword_record("OutputKeywords", "outputs")):
    """What generate() returns beside the sequences (output_scores: one (1, V) processed-score
    row per new token; output_logits: one (1, V) raw-logit row per new token)."""
