"""Which generation settings a call uses: the call's keywords over the checkpoint's.

`dynaspec.generate` takes transformers' generation keywords with transformers' names and
meaning (`GenerationKwargs`, one entry each in compat/keywords.py). As in transformers, a value
that the target's generation config sets explicitly (one that differs from a fresh
`GenerationConfig()`, e.g. Qwen2.5-Instruct's `repetition_penalty`, `do_sample` and `top_p`)
applies unless the call passes the keyword; a keyword passed as None switches the setting
off. Two deliberate differences:

- where neither the call nor the checkpoint sets a value, dynaspec's own defaults apply
  (greedy, 128 new tokens, no top-k), not transformers' fallbacks (`max_length=20`,
  `top_k=50`);
- a `generation_config=` passed to the call replaces the checkpoint's settings entirely, so
  `GenerationConfig()` is a clean slate (transformers 5 fills its unset fields from the
  model's config). Only the EOS ids still come from the target when it leaves them unset.

Nothing here writes onto a model or its config: values are read and copied.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from transformers import GenerationConfig

from dynaspec.compat.keywords import DEFAULT_MAX_NEW_TOKENS, KEYWORDS, GenerationKwargs, of_record
from dynaspec.compat.records import OutputConfig, ProcessorConfig, SamplingConfig
from dynaspec.compat.validation import (
    check_keyword_types,
    check_token_keywords,
    eos_ids,
    warn_unfeasible_lengths,
)
from dynaspec.core.config import LimitsConfig
from dynaspec.errors import ConfigError, UnsupportedOptionError

# Read from a generation config (the checkpoint's or the call's) when set explicitly there:
# every keyword but the EOS ids (_eos reads them) and those accepted for compatibility only.
_FROM_CONFIG = tuple(
    keyword.name
    for keyword in KEYWORDS
    if keyword.record != "accepted" and keyword.name != "eos_token_id"
)

_TYPES = {keyword.name: keyword.type for keyword in KEYWORDS}


@dataclass(frozen=True)
class GenerationSettings:
    """Everything a call asked for, resolved against the checkpoint and dynaspec's defaults."""

    sampling: SamplingConfig  # greedy or sampling, and the sampling warpers
    processors: ProcessorConfig  # transformers' logits processors
    limits: LimitsConfig  # new tokens, EOS, max_time, stop strings
    outputs: OutputConfig  # scores/logits to return


def explicit_settings(config: Any) -> dict[str, Any]:
    """The settings a generation config sets explicitly: those unlike a fresh GenerationConfig()."""
    if config is None:
        return {}
    fresh = GenerationConfig()
    return {
        key: getattr(config, key)
        for key in _FROM_CONFIG
        if hasattr(config, key) and getattr(config, key) != getattr(fresh, key, None)
    }


def resolve_settings(
    call: Mapping[str, Any],
    target: Any,
    generation_config: Any,
    input_length: int,
    seed: int | Sequence[int] | None,
    vocab_size: int = 0,
    seed_mode: str = "keyed",
) -> GenerationSettings:
    """The settings of one call: `call` keywords over `generation_config` (else the target's).

    input_length: tokens the decoder starts from (the prompt; 1 for encoder-decoder models),
    against which `max_length` and `min_length` count. vocab_size: the target's, which
    token ids must lie below (0: unchecked). seed_mode: what `seed` means (SamplingConfig).
    """
    _check_names(call)
    checkpoint = getattr(target, "generation_config", None)
    base = generation_config if generation_config is not None else checkpoint
    source = "generation_config" if generation_config is not None else "the target's config"
    values = explicit_settings(base)
    origin = {key: f"{key}={value!r} (set by {source})" for key, value in values.items()}
    values.update(call)
    origin.update({key: f"{key}={value!r}" for key, value in call.items()})
    values = check_keyword_types(values, _TYPES, origin)
    check_token_keywords(values, origin, vocab_size)
    _refuse(values, origin)
    mode = {} if seed is None else {"seed_mode": seed_mode}  # without a seed it means nothing
    sampling = SamplingConfig(seed=seed, **mode, **_record("sampling", values))
    limits = LimitsConfig(
        max_new_tokens=_max_new_tokens(values, input_length),
        eos_token_ids=eos_ids(_eos(values, base, checkpoint), None),
        max_time=values.get("max_time"),
        stop_strings=_strings(values.get("stop_strings")),
    )
    processors = ProcessorConfig(**_record("processors", values))
    warn_unfeasible_lengths(
        processors.min_length, processors.min_new_tokens, limits.max_new_tokens, input_length
    )
    outputs = OutputConfig(**_record("outputs", values))
    return GenerationSettings(sampling, processors, limits, outputs)


def _eos(call: Mapping[str, Any], base: Any, checkpoint: Any) -> Any:
    """EOS ids: the call's, else the generation config's, else the target's (None: none)."""
    for candidate in (call.get("eos_token_id"), getattr(base, "eos_token_id", None)):
        if candidate is not None:
            return candidate
    return getattr(checkpoint, "eos_token_id", None)


def _check_names(call: Mapping[str, Any]) -> None:
    known = GenerationKwargs.__annotations__
    for key in call:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"dynaspec.generate() got an unknown keyword {key!r}{hint} It takes the "
                "transformers generation keywords listed in dynaspec.GenerationKwargs"
            )


def _record(record: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of one record: each keyword's value, its table default where unset (None).
    A processor's value is kept as given; a yes/no switch that builds none becomes a bool."""
    fields = {}
    for keyword in of_record(record):
        value = values.get(keyword.name)
        value = keyword.default if value is None else value
        switch = keyword.type is bool and keyword.stage is None
        fields[keyword.name] = bool(value) if switch else value
    return fields


def _refuse(values: Mapping[str, Any], origin: Mapping[str, str]) -> None:
    """Raises UnsupportedOptionError for what speculative decoding cannot reproduce."""
    for keyword in of_record("refused"):
        if keyword.active(values.get(keyword.name), None):
            raise UnsupportedOptionError(keyword.refusal.format(origin=origin[keyword.name]))


def _max_new_tokens(values: Mapping[str, Any], input_length: int) -> int:
    """max_new_tokens, else max_length minus the input, else dynaspec's default (128)."""
    if values.get("max_new_tokens") is not None:
        return values["max_new_tokens"]
    max_length = values.get("max_length")
    if max_length is None:
        return DEFAULT_MAX_NEW_TOKENS
    if max_length <= input_length:
        raise ConfigError(
            f"max_length {max_length} leaves no room after the {input_length} input tokens: "
            "pass max_new_tokens instead"
        )
    return max_length - input_length


def _strings(stop_strings: str | list[str] | None) -> tuple[str, ...]:
    if stop_strings is None:
        return ()
    if isinstance(stop_strings, str):
        return (stop_strings,)
    return tuple(stop_strings)


def pad_token_id(
    target: Any,
    *,
    given: int | None = None,
    tokenizer: Any = None,
    eos_token_ids: tuple[int, ...] = (),
) -> int | None:
    """The token that pads a row after its end, as transformers picks it: the call's
    `pad_token_id`, else the tokenizer's, else the target's generation config's, else its
    first EOS id (None when there is none)."""
    config = getattr(target, "generation_config", None)
    for candidate in (
        given,
        getattr(tokenizer, "pad_token_id", None),
        getattr(config, "pad_token_id", None),
    ):
        if isinstance(candidate, int):
            return candidate
    return eos_token_ids[0] if eos_token_ids else None
