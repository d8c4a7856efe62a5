"""Frozen configuration objects. Names follow transformers' assisted generation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dynaspec.errors import ConfigError

# The schedules accepted in `num_assistant_tokens_schedule` are those of
# dynaspec.policies.SCHEDULES (checked where the policy is made). The default: cost-aware,
# it drafts only while its measured costs say drafting pays. "dynamic" is the published
# confidence rule (Mamou et al. 2024), transformers' default.
DEFAULT_SCHEDULE = "adaptive"


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
        threshold = self.assistant_confidence_threshold
        if not 0.0 <= threshold <= 1.0:
            raise ConfigError(
                f"assistant_confidence_threshold must lie in [0, 1], got {threshold}; "
                "0 turns the confidence stop off"
            )


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen from a distribution; applied alike to draft and target."""

    do_sample: bool = False  # False: greedy (argmax); True: sample from the processed probs
    temperature: float = 1.0  # logits are divided by this before the softmax
    top_k: int | None = None  # keep the k most likely tokens (None or 0: keep all)
    top_p: float | None = None  # keep the smallest set with cumulative prob >= top_p
    seed: int | None = None  # seeds the sampling generator; None: nondeterministic
    min_p: float | None = None  # drop tokens below min_p x the top token's probability
    typical_p: float | None = None  # locally typical sampling: keep this much typical mass
    epsilon_cutoff: float | None = None  # drop tokens below this probability (0: off)
    eta_cutoff: float | None = None  # eta sampling: entropy-dependent cutoff (0: off)
    top_h: float | None = None  # keep tokens within this share of the entropy (top-H)

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
        if self.max_time is not None and not self.max_time > 0:
            raise ConfigError(f"max_time must be > 0 seconds, got {self.max_time}")


@dataclass(frozen=True)
class ProcessorConfig:
    """transformers' logits processors, by their generate() names and with their meaning.

    None (or the neutral value) leaves a processor out. Values are handed to transformers'
    own classes as given; an invalid one raises ConfigError naming the keyword.
    """

    repetition_penalty: float | None = None  # > 1 discourages tokens already in the sequence
    encoder_repetition_penalty: float | None = None  # > 1 favours tokens of the prompt
    no_repeat_ngram_size: int | None = None  # no n-gram of this size occurs twice
    encoder_no_repeat_ngram_size: int | None = None  # no n-gram of the prompt is repeated
    bad_words_ids: Any = None  # list of token-id lists that are never generated
    sequence_bias: Any = None  # [[token ids, bias], ...] added when the sequence completes
    min_length: int | None = None  # EOS is suppressed before this total length
    min_new_tokens: int | None = None  # EOS is suppressed before this many new tokens
    suppress_tokens: Any = None  # token ids that are never generated
    begin_suppress_tokens: Any = None  # token ids not generated as the first new token
    forced_bos_token_id: int | None = None  # forced as the first generated token
    forced_eos_token_id: Any = None  # forced (int or list) when max_length is reached
    exponential_decay_length_penalty: Any = None  # (start index, decay factor) for EOS
    remove_invalid_values: bool = False  # replace nan/inf scores (slower)
    renormalize_logits: bool = False  # log-softmax the scores after every processor


@dataclass(frozen=True)
class OutputConfig:
    """What generate() returns beside the sequences."""

    output_scores: bool = False  # .scores: one (1, V) processed-score row per new token
    output_logits: bool = False  # .logits: one (1, V) raw-logit row per new token
