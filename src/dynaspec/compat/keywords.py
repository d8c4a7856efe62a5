"""transformers' generation keywords, one entry each: the table the rest is derived from.

An entry says, for one keyword: its type and a one-line doc (they make `GenerationKwargs`),
the settings record it fills and its default there (compat/settings.py resolves the call and
the checkpoint into compat/records.py's records, whose fields come from here), and, for a
logits processor or warper, the factory that builds transformers' class and the condition
under which it is built (compat/processing.py). Within each stage the entries stand in
transformers' order (5.x, `GenerationMixin._get_logits_processor`), the order of the list:
the processors, then the caller's `logits_processor` objects, then the warpers when
sampling, then `renormalize_logits`.

A new keyword is one entry in `KEYWORDS`: `processor(...)` or `warper(...)` at its place in
transformers' order, `refused(...)` for one speculative decoding cannot reproduce,
`setting(...)` for one that builds no processor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, make_dataclass
from types import GenericAlias
from typing import Any, TypedDict

import torch
from transformers.generation import logits_process as lp

from dynaspec.errors import ConfigError

DEFAULT_MAX_NEW_TOKENS = 128  # dynaspec's default when neither the call nor the checkpoint sets one

# The records whose fields are keywords (compat/records.py), by GenerationSettings' names.
RECORDS = ("sampling", "processors", "outputs")
# Where a keyword's processor goes: before the caller's objects, after them when sampling,
# or last (transformers' order).
PROCESSORS, WARPERS, LAST = "processors", "warpers", "last"


@dataclass(frozen=True)
class BuildContext:
    """What a processor factory may need beside its keyword's value."""

    config: Any  # the record the values come from (ProcessorConfig or SamplingConfig)
    prompt: torch.Tensor | None = None  # (1, T) the encoder's input (decoder-only: the prompt)
    input_length: int = 0  # tokens the decoder starts from, against which lengths count
    max_length: int = 0  # input_length + max_new_tokens
    eos: torch.Tensor | None = None  # the EOS ids; None when there are none
    device: torch.device | None = None  # where the processors run (the prompt's device)
    pads: int = 0  # the prompt's left padding (a batch row), which repetition_penalty skips


Factory = Callable[[Any, BuildContext], Any]  # (value, context) -> transformers' processor
Condition = Callable[[Any, Any], bool]  # (value, context or None) -> whether it applies


def is_set(value: Any, context: Any) -> bool:
    return value is not None


def is_true(value: Any, context: Any) -> bool:
    return bool(value)


def differs(neutral: float) -> Condition:
    """Set to something other than the neutral value (which builds nothing)."""
    return lambda value, context: value is not None and value != neutral


def positive(value: Any, context: Any) -> bool:
    return value is not None and value > 0


def within_prompt(value: Any, context: BuildContext | None) -> bool:
    """Positive and no longer than the prompt: a longer n-gram cannot occur in it, and
    transformers would list all of its (zero) n-grams through `value` slices of the prompt."""
    prompt = None if context is None else context.prompt
    return positive(value, context) and (prompt is None or value <= prompt.shape[-1])


def below_one(value: Any, context: Any) -> bool:
    return value is not None and value < 1.0


def inside_unit(value: Any, context: Any) -> bool:
    return value is not None and 0.0 < value < 1.0


def positive_with_eos(value: Any, context: BuildContext) -> bool:
    """Set, positive, and there are EOS ids to suppress."""
    return value is not None and context.eos is not None and value > 0


@dataclass(frozen=True)
class Keyword:
    """One generation keyword: its type and doc, its record and default, its processor."""

    name: str  # transformers' name
    type: Any  # its type in GenerationKwargs
    doc: str  # one line, in GenerationKwargs' docstring
    record: str  # one of RECORDS, or "limits" (settings.py), "refused" or "accepted"
    default: Any = None  # its value in the record when neither the call nor a config sets it
    stage: str | None = None  # PROCESSORS, WARPERS or LAST; None: it builds no processor
    build: Factory | None = None  # (value, context) -> transformers' processor
    active: Condition = is_set  # whether the value builds the processor (refused: is refused)
    read: Callable[[BuildContext], Any] | None = None  # the value built from, if not its own
    refusal: str = ""  # refused: the error message; {origin} names the value and who set it

    def value(self, context: BuildContext) -> Any:
        """The value its processor is built from."""
        return getattr(context.config, self.name) if self.read is None else self.read(context)


def setting(
    name: str, type_: Any, doc: str, record: str = "limits", default: Any = None
) -> Keyword:
    """A keyword that builds no processor."""
    return Keyword(name, type_, doc, record, default)


def processor(
    name: str,
    type_: Any,
    doc: str,
    build: Factory,
    active: Condition = is_set,
    *,
    default: Any = None,
    stage: str = PROCESSORS,
    read: Callable[[BuildContext], Any] | None = None,
) -> Keyword:
    """A logits processor's keyword (ProcessorConfig)."""
    return Keyword(name, type_, doc, "processors", default, stage, build, active, read)


def warper(
    name: str, type_: Any, doc: str, build: Factory, active: Condition = is_set, default: Any = None
) -> Keyword:
    """A sampling warper's keyword (SamplingConfig), built only when sampling."""
    return Keyword(name, type_, doc, "sampling", default, WARPERS, build, active)


def refused(name: str, type_: Any, doc: str, active: Condition, refusal: str) -> Keyword:
    """A keyword whose `active` values raise UnsupportedOptionError(refusal)."""
    return Keyword(name, type_, doc, "refused", active=active, refusal=refusal)


def _min_length(context: BuildContext) -> Any:
    """transformers turns min_new_tokens into min_length (input + min_new_tokens), keeps both."""
    config = context.config
    if config.min_new_tokens is None:
        return config.min_length
    return context.input_length + config.min_new_tokens


def _suppress_at_begin(tokens: Any, context: BuildContext) -> Any:
    """Suppressed at the first new token (after a forced BOS, for a decoder starting empty)."""
    begin = context.input_length
    if context.input_length <= 1 and context.config.forced_bos_token_id is not None:
        begin += 1
    return lp.SuppressTokensAtBeginLogitsProcessor(tokens, begin, device=context.device)


KEYWORDS: tuple[Keyword, ...] = (
    # Lengths and stopping (LimitsConfig; stopping criteria: processing.build_stopping).
    setting("max_new_tokens", int, "most new tokens (default 128)", default=DEFAULT_MAX_NEW_TOKENS),
    setting(
        "max_length", int, "most tokens in all, prompt included (max_new_tokens takes precedence)"
    ),
    setting("max_time", float, "seconds; stop at the first token emitted after that"),
    setting(
        "stop_strings", str | list[str], "stop after the token completing one (needs tokenizer=)"
    ),
    setting(
        "eos_token_id", int | list[int], "stop after any of these (default: the target's config)"
    ),
    # Logits processors, in transformers' order.
    processor(
        "sequence_bias",
        Any,
        "[[token ids, bias], ...] added when the sequence completes",
        lambda value, c: lp.SequenceBiasLogitsProcessor(value),
    ),
    processor(
        "encoder_repetition_penalty",
        float,
        "> 1 favours tokens of the prompt",
        lambda value, c: lp.EncoderRepetitionPenaltyLogitsProcessor(
            penalty=value, encoder_input_ids=c.prompt
        ),
        differs(1.0),
    ),
    processor(
        "repetition_penalty",
        float,
        "> 1 discourages tokens already in the sequence",
        lambda value, c: lp.RepetitionPenaltyLogitsProcessor(
            value, prompt_ignore_length=c.pads or None
        ),
        differs(1.0),
    ),
    processor(
        "no_repeat_ngram_size",
        int,
        "no n-gram of this size occurs twice",
        lambda value, c: lp.NoRepeatNGramLogitsProcessor(value),
        positive,
    ),
    processor(
        "encoder_no_repeat_ngram_size",
        int,
        "no n-gram of the prompt is repeated",
        lambda value, c: lp.EncoderNoRepeatNGramLogitsProcessor(value, c.prompt),
        within_prompt,
    ),
    processor(
        "bad_words_ids",
        list[list[int]],
        "token sequences never generated",
        lambda value, c: lp.NoBadWordsLogitsProcessor(value, c.eos),
    ),
    processor(
        "min_length",
        int,
        "EOS is suppressed before this total length",
        lambda value, c: lp.MinLengthLogitsProcessor(value, c.eos, device=c.device),
        positive_with_eos,
        read=_min_length,
    ),
    processor(
        "min_new_tokens",
        int,
        "EOS is suppressed before this many new tokens",
        lambda value, c: lp.MinNewTokensLengthLogitsProcessor(
            c.input_length, value, c.eos, device=c.device
        ),
        positive_with_eos,
    ),
    processor(
        "forced_bos_token_id",
        int,
        "forced as the first generated token",
        lambda value, c: lp.ForcedBOSTokenLogitsProcessor(value),
    ),
    processor(
        "forced_eos_token_id",
        int | list[int],
        "forced when max_length is reached",
        lambda value, c: lp.ForcedEOSTokenLogitsProcessor(c.max_length, value, device=c.device),
    ),
    processor(
        "remove_invalid_values",
        bool,
        "replace nan/inf scores (slower)",
        lambda value, c: lp.InfNanRemoveLogitsProcessor(),
        is_true,
        default=False,
    ),
    processor(
        "exponential_decay_length_penalty",
        tuple[int, float],
        "(start index, decay factor) for EOS",
        lambda value, c: lp.ExponentialDecayLengthPenalty(value, c.eos, c.input_length),
    ),
    processor(
        "suppress_tokens",
        list[int],
        "never generated",
        lambda value, c: lp.SuppressTokensLogitsProcessor(value, device=c.device),
    ),
    processor(
        "begin_suppress_tokens",
        list[int],
        "not generated as the first new token",
        _suppress_at_begin,
    ),
    # Sampling: the warpers in transformers' order, after the caller's logits_processor.
    setting(
        "do_sample",
        bool,
        "sample from the processed distribution (default: greedy)",
        "sampling",
        default=False,
    ),
    warper(
        "temperature",
        float,
        "sampling: logits are divided by this",
        lambda value, c: lp.TemperatureLogitsWarper(value),
        differs(1.0),
        default=1.0,
    ),
    warper(
        "top_h",
        float,
        "sampling: top-H (keep tokens within this share of the entropy)",
        lambda value, c: lp.TopHLogitsWarper(top_h=value),
    ),
    warper(
        "top_k",
        int,
        "sampling: keep the k most likely tokens (None or 0: all)",
        lambda value, c: lp.TopKLogitsWarper(top_k=value),
        differs(0),
    ),
    warper(
        "top_p",
        float,
        "sampling: keep the smallest set with cumulative probability >= top_p",
        lambda value, c: lp.TopPLogitsWarper(top_p=value),
        below_one,
    ),
    warper(
        "min_p",
        float,
        "sampling: drop tokens below min_p x the top token's probability",
        lambda value, c: lp.MinPLogitsWarper(min_p=value),
    ),
    warper(
        "typical_p",
        float,
        "sampling: locally typical sampling mass",
        lambda value, c: lp.TypicalLogitsWarper(mass=value),
        below_one,
    ),
    warper(
        "epsilon_cutoff",
        float,
        "sampling: drop tokens below this probability",
        lambda value, c: lp.EpsilonLogitsWarper(epsilon=value),
        inside_unit,
    ),
    warper(
        "eta_cutoff",
        float,
        "sampling: eta sampling cutoff",
        lambda value, c: lp.EtaLogitsWarper(epsilon=value),
        inside_unit,
    ),
    # Last, after the warpers.
    processor(
        "renormalize_logits",
        bool,
        "log-softmax the scores after every processor",
        lambda value, c: lp.LogitNormalization(),
        is_true,
        default=False,
        stage=LAST,
    ),
    # What generate() returns beside the sequences.
    setting(
        "output_scores",
        bool,
        "return .scores: one processed (1, V) row per new token",
        "outputs",
        default=False,
    ),
    setting(
        "output_logits",
        bool,
        "return .logits: one raw (1, V) row per new token",
        "outputs",
        default=False,
    ),
    # What speculative decoding cannot reproduce: refused with UnsupportedOptionError.
    refused(
        "num_beams",
        int,
        "only 1: beam search is refused (UnsupportedOptionError)",
        lambda value, c: (value or 1) > 1,
        "beam search ({origin}) is not speculative decoding: pass num_beams=1 for greedy or "
        "sampled output, or call target.generate(...) for beam search",
    ),
    refused(
        "num_return_sequences",
        int,
        "only 1: call generate() once per sample",
        lambda value, c: (value or 1) > 1,
        "{origin}: dynaspec returns one sequence per call; call generate() once per sequence "
        "(with do_sample=True and a different seed each)",
    ),
    refused(
        "guidance_scale",
        float,
        "only None or 1: classifier-free guidance is refused",
        lambda value, c: value not in (None, 1, 1.0),
        "classifier-free guidance ({origin}) runs the model a second time per token, which the "
        "draft's proposals cannot follow: pass guidance_scale=None or use target.generate(...)",
    ),
    refused(
        "watermarking_config",
        Any,
        "only None: watermarking is refused",
        is_set,
        "watermarking ({origin}) is not supported: its processor keeps state across calls; "
        "pass watermarking_config=None or use target.generate(...)",
    ),
    # Accepted so that transformers' calls run unchanged; they change nothing here.
    setting(
        "return_dict_in_generate",
        bool,
        "accepted for compatibility: the result is always a record",
        "accepted",
    ),
    setting(
        "pad_token_id",
        int,
        "accepted for compatibility: one unpadded sequence needs no padding",
        "accepted",
    ),
    setting(
        "use_cache",
        bool,
        "accepted for compatibility: dynaspec always decodes with a cache",
        "accepted",
    ),
)


def of_record(record: str) -> tuple[Keyword, ...]:
    """The keywords of one record ("sampling", "limits", "refused", ...), in table order."""
    return tuple(keyword for keyword in KEYWORDS if keyword.record == record)


def of_stage(stage: str) -> tuple[Keyword, ...]:
    """The keywords whose processors go to `stage`, in transformers' order."""
    return tuple(keyword for keyword in KEYWORDS if keyword.stage == stage)


def build_stage(stage: str, context: BuildContext) -> list[Any]:
    """The processors of the table's `stage` whose condition holds, in transformers' order."""
    built = []
    for keyword in of_stage(stage):
        value = keyword.value(context)
        if keyword.active(value, context):
            built.append(_make(keyword.name, value, keyword.build, value, context))
    return built


def _make(keyword: str, value: Any, factory: Any, *args: Any, **kwargs: Any) -> Any:
    """factory(*args, **kwargs); transformers' ValueError (or the KeyError, IndexError of its
    checks on a malformed value) becomes a ConfigError naming `keyword`."""
    try:
        return factory(*args, **kwargs)
    except (ValueError, TypeError, KeyError, IndexError) as err:
        raise ConfigError(f"{keyword}={value!r} is invalid: {err}") from err


def keyword_record(name: str, record: str) -> type:
    """A frozen dataclass `name` with one field per keyword of `record`, in table order, each
    defaulting to the table's default (None: unset). compat/records.py's records extend it."""
    fields = [
        (k.name, k.type if k.default is not None else k.type | None, field(default=k.default))
        for k in of_record(record)
    ]
    return make_dataclass(name, fields, frozen=True, namespace={"__module__": __name__})


def _type_name(type_: Any) -> str:
    plain = isinstance(type_, type) and not isinstance(type_, GenericAlias)
    return type_.__name__ if plain else str(type_).replace("typing.", "")


def _generation_kwargs() -> type:
    """The TypedDict of every keyword, its docstring a line per keyword."""
    typed = TypedDict("GenerationKwargs", {k.name: k.type for k in KEYWORDS}, total=False)
    lines = [f"    {k.name} ({_type_name(k.type)}): {k.doc}" for k in KEYWORDS]
    typed.__doc__ = (
        "transformers' generation keywords accepted by `dynaspec.generate` (same meaning).\n\n"
        "One line per keyword (the table: dynaspec/compat/keywords.py):\n\n" + "\n".join(lines)
    )
    return typed


GenerationKwargs = _generation_kwargs()
