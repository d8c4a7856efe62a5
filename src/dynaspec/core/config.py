"""Frozen configuration of the round and the loop: how far to draft and when to stop. Names
follow transformers' assisted generation; the records of transformers' generation keywords
(sampling, processors, outputs) are compat/records.py's."""

from __future__ import annotations

from dataclasses import dataclass

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
