"""Which generation settings a call uses: the call's keywords over the checkpoint's.

`dynaspec.generate` takes transformers' generation keywords with transformers' names and
meaning (`GenerationKwargs`). As in transformers, a value that the target's generation config
sets explicitly (one that differs from a fresh `GenerationConfig()`, e.g. Qwen2.5-Instruct's
`repetition_penalty`, `do_sample` and `top_p`) applies unless the call passes the keyword;
a keyword passed as None switches the setting off. Two deliberate differences:

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from transformers import GenerationConfig

from dynaspec.core.config import LimitsConfig, OutputConfig, ProcessorConfig, SamplingConfig
from dynaspec.core.validation import eos_ids
from dynaspec.errors import ConfigError, UnsupportedOptionError

DEFAULT_MAX_NEW_TOKENS = 128  # dynaspec's default when neither the call nor the checkpoint sets one


class GenerationKwargs(TypedDict, total=False):
    """transformers' generation keywords accepted by `dynaspec.generate` (same meaning)."""

    max_new_tokens: int  # most new tokens (default 128)
    max_length: int  # most tokens in all, prompt included (max_new_tokens takes precedence)
    min_new_tokens: int  # EOS is suppressed before this many new tokens
    min_length: int  # EOS is suppressed before this total length
    max_time: float  # seconds; stop at the first token emitted after that
    stop_strings: str | list[str]  # stop after the token completing one (needs tokenizer=)
    eos_token_id: int | list[int]  # stop after any of these (default: the target's config)
    do_sample: bool  # sample from the processed distribution (default: greedy)
    temperature: float  # sampling: logits are divided by this
    top_k: int  # sampling: keep the k most likely tokens
    top_p: float  # sampling: keep the smallest set with cumulative probability >= top_p
    min_p: float  # sampling: drop tokens below min_p x the top token's probability
    typical_p: float  # sampling: locally typical sampling mass
    epsilon_cutoff: float  # sampling: drop tokens below this probability
    eta_cutoff: float  # sampling: eta sampling cutoff
    top_h: float  # sampling: top-H (entropy share) cutoff
    repetition_penalty: float  # > 1 discourages tokens already in the sequence
    encoder_repetition_penalty: float  # > 1 favours tokens of the prompt
    no_repeat_ngram_size: int  # no n-gram of this size occurs twice
    encoder_no_repeat_ngram_size: int  # no n-gram of the prompt is repeated
    bad_words_ids: list[list[int]]  # token sequences never generated
    sequence_bias: Any  # [[token ids, bias], ...]
    suppress_tokens: list[int]  # never generated
    begin_suppress_tokens: list[int]  # not generated as the first new token
    forced_bos_token_id: int  # forced as the first generated token
    forced_eos_token_id: int | list[int]  # forced when max_length is reached
    exponential_decay_length_penalty: tuple[int, float]  # (start index, decay factor)
    remove_invalid_values: bool  # replace nan/inf scores
    renormalize_logits: bool  # log-softmax the scores after every processor
    output_scores: bool  # return .scores: one processed (1, V) row per new token
    output_logits: bool  # return .logits: one raw (1, V) row per new token
    num_beams: int  # only 1: beam search is refused (UnsupportedOptionError)
    num_return_sequences: int  # only 1: call generate() once per sample
    guidance_scale: float  # only None or 1: classifier-free guidance is refused
    watermarking_config: Any  # only None: watermarking is refused
    return_dict_in_generate: bool  # accepted for compatibility: the result is always a record
    pad_token_id: int  # accepted for compatibility: one unpadded sequence needs no padding
    use_cache: bool  # accepted for compatibility: dynaspec always decodes with a cache


_SAMPLING = ("do_sample", "temperature", "top_k", "top_p", "min_p", "typical_p")
_SAMPLING += ("epsilon_cutoff", "eta_cutoff", "top_h")
_PROCESSORS = tuple(ProcessorConfig.__dataclass_fields__)
_LIMITS = ("max_new_tokens", "max_length", "max_time", "stop_strings")
_OUTPUTS = tuple(OutputConfig.__dataclass_fields__)
_REFUSED = ("num_beams", "num_return_sequences", "guidance_scale", "watermarking_config")
# Read from a generation config (the checkpoint's or the call's) when set explicitly there.
_FROM_CONFIG = _SAMPLING + _PROCESSORS + _LIMITS + _OUTPUTS + _REFUSED


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
    seed: int | None,
) -> GenerationSettings:
    """The settings of one call: `call` keywords over `generation_config` (else the target's).

    input_length: tokens the decoder starts from (the prompt; 1 for encoder-decoder models),
    against which `max_length` and `min_length` count.
    """
    _check_names(call)
    checkpoint = getattr(target, "generation_config", None)
    base = generation_config if generation_config is not None else checkpoint
    source = "generation_config" if generation_config is not None else "the target's config"
    values = explicit_settings(base)
    origin = {key: f"{key}={value!r} (set by {source})" for key, value in values.items()}
    values.update(call)
    origin.update({key: f"{key}={value!r}" for key, value in call.items()})
    _refuse(values, origin)
    sampling = SamplingConfig(
        do_sample=bool(values.get("do_sample")),
        temperature=1.0 if values.get("temperature") is None else values["temperature"],
        seed=seed,
        **{key: values.get(key) for key in _SAMPLING[2:]},
    )
    limits = LimitsConfig(
        max_new_tokens=_max_new_tokens(values, input_length),
        eos_token_ids=eos_ids(_eos(call, base, checkpoint), None),
        max_time=values.get("max_time"),
        stop_strings=_strings(values.get("stop_strings")),
    )
    processors = ProcessorConfig(
        **{key: values[key] for key in _PROCESSORS if values.get(key) is not None}
    )
    outputs = OutputConfig(**{key: bool(values.get(key)) for key in _OUTPUTS})
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


def _refuse(values: Mapping[str, Any], origin: Mapping[str, str]) -> None:
    """Raises UnsupportedOptionError for what speculative decoding cannot reproduce."""
    if (values.get("num_beams") or 1) > 1:
        raise UnsupportedOptionError(
            f"beam search ({origin['num_beams']}) is not speculative decoding: pass num_beams=1 "
            "for greedy or sampled output, or call target.generate(...) for beam search"
        )
    if (values.get("num_return_sequences") or 1) > 1:
        raise UnsupportedOptionError(
            f"{origin['num_return_sequences']}: dynaspec returns one sequence per call; call "
            "generate() once per sequence (with do_sample=True and a different seed each)"
        )
    if values.get("guidance_scale") not in (None, 1, 1.0):
        raise UnsupportedOptionError(
            f"classifier-free guidance ({origin['guidance_scale']}) runs the model a second "
            "time per token, which the draft's proposals cannot follow: pass guidance_scale=None "
            "or use target.generate(...)"
        )
    if values.get("watermarking_config") is not None:
        raise UnsupportedOptionError(
            f"watermarking ({origin['watermarking_config']}) is not supported: its processor "
            "keeps state across calls; pass watermarking_config=None or use target.generate(...)"
        )


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
