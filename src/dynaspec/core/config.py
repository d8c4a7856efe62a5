"""Frozen configuration objects. Names follow transformers' assisted generation."""

from __future__ import annotations

from dataclasses import dataclass

from dynaspec.errors import ConfigError

# Schedules accepted in `num_assistant_tokens_schedule`. "heuristic_transient" is transformers'
# name for a heuristic that starts afresh every call, which is what every dynaspec policy does.
SCHEDULES = ("dynamic", "heuristic", "heuristic_transient", "constant", "adaptive")
# The default: cost-aware, it drafts only while its measured costs say drafting pays. "dynamic"
# is the published confidence rule (Mamou et al. 2024), transformers' default.
DEFAULT_SCHEDULE = "adaptive"


@dataclass(frozen=True)
class SpecConfig:
    """How many tokens the draft proposes per round, and how that number is chosen."""

    num_assistant_tokens: int = 20  # most tokens drafted in one round (start value for heuristic)
    assistant_confidence_threshold: float = 0.4  # dynamic: stop drafting below this draft prob
    num_assistant_tokens_schedule: str = DEFAULT_SCHEDULE  # one of SCHEDULES

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
        threshold = self.assistant_confidence_threshold
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(
                f"assistant_confidence_threshold must lie in [0, 1], got {threshold}; "
                "0 turns the confidence stop off"
            )
        if self.num_assistant_tokens_schedule not in SCHEDULES:
            raise ConfigError(
                f"unknown num_assistant_tokens_schedule {self.num_assistant_tokens_schedule!r}; "
                f"choose one of {', '.join(SCHEDULES)}"
            )


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen from a distribution; applied alike to draft and target."""

    do_sample: bool = False  # False: greedy (argmax); True: sample from the processed probs
    temperature: float = 1.0  # logits are divided by this before the softmax
    top_k: int | None = None  # keep the k most likely tokens (None or 0: keep all)
    top_p: float | None = None  # keep the smallest set with cumulative prob >= top_p
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


@dataclass(frozen=True)
class LimitsConfig:
    """When generation stops."""

    max_new_tokens: int = 128  # never emit more new tokens than this
    eos_token_ids: tuple[int, ...] = ()  # stop after emitting any of these (it is kept)

    def __post_init__(self) -> None:
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise ConfigError(f"max_new_tokens must be an int, got {self.max_new_tokens!r}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
