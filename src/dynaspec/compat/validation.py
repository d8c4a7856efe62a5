"""Checks that turn bad input into a typed error before any model runs."""

from __future__ import annotations

import math
import numbers
import operator
import types
import typing
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from dynaspec.core.protocols import LookaheadPolicy, ModelAdapter
from dynaspec.errors import (
    ConfigError,
    IncompatibleModelsError,
    InputError,
    UnsupportedOptionError,
)


def check_prompt(input_ids: Any) -> torch.Tensor:
    """Returns the prompt as a (1, T) LongTensor, or raises InputError."""
    if not isinstance(input_ids, torch.Tensor):
        raise InputError(
            "input_ids must be a torch.LongTensor of shape (1, T), got "
            f"{type(input_ids).__name__}; use tokenizer(text, return_tensors='pt').input_ids"
        )
    if input_ids.dim() == 1:
        input_ids = input_ids.unsqueeze(0)
    if input_ids.dim() != 2:
        raise InputError(f"input_ids must have shape (1, T), got {tuple(input_ids.shape)}")
    if input_ids.shape[0] != 1:
        raise InputError(
            f"batch size {input_ids.shape[0]} is not supported yet: dynaspec decodes one "
            "sequence at a time; call generate() once per prompt"
        )
    if input_ids.shape[1] == 0:
        raise InputError("the prompt is empty: give at least one token (e.g. the BOS token)")
    if input_ids.dtype not in (torch.long, torch.int):
        raise InputError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.device.type == "meta":
        raise InputError(
            "input_ids are on the meta device, which holds no values: pass the token ids "
            "the tokenizer returned (on the CPU or the model's device)"
        )
    return input_ids.long()


def check_call_arguments(seed: Any, streamer: Any, policy: Any) -> None:
    """Raises ConfigError for generate()'s own arguments of the wrong kind."""
    for one in seed if isinstance(seed, list | tuple) else [seed]:
        if one is not None and (isinstance(one, bool) or not isinstance(one, int)):
            raise ConfigError(
                f"seed must be an int (e.g. seed=0), a list of one int per batch row, or "
                f"None, got {seed!r}"
            )
        if one is not None and not -(2**63) <= one < 2**64:  # what torch.Generator takes
            raise ConfigError(f"seed must lie in [-2**63, 2**64) (e.g. seed=0), got {one}")
    if streamer is not None and not all(
        callable(getattr(streamer, name, None)) for name in ("put", "end")
    ):
        raise ConfigError(
            f"streamer must have put(tokens) and end() methods, as transformers' TextStreamer "
            f"has; got a {type(streamer).__name__}"
        )
    if policy is not None and not isinstance(policy, LookaheadPolicy):
        hint = (
            f"; to choose a schedule by name pass num_assistant_tokens_schedule={policy!r}"
            if isinstance(policy, str)
            else ""
        )
        raise ConfigError(
            f"policy must be a policy object (e.g. dynaspec.AdaptivePolicy()), got a "
            f"{type(policy).__name__}{hint}"
        )


def check_pair(target: ModelAdapter, draft: ModelAdapter | None) -> None:
    """Raises IncompatibleModelsError when the draft cannot propose tokens for the target."""
    if draft is None:
        return
    if target.is_encoder_decoder != draft.is_encoder_decoder:
        kinds = {True: "encoder-decoder", False: "decoder-only"}
        raise IncompatibleModelsError(
            f"the target is {kinds[target.is_encoder_decoder]} but the draft is "
            f"{kinds[draft.is_encoder_decoder]}: pair models of the same kind"
        )
    if target.vocab_size != draft.vocab_size:
        raise IncompatibleModelsError(
            f"draft vocabulary {draft.vocab_size} != target vocabulary {target.vocab_size}: "
            "the draft does not share the target's tokenizer; to draft with it anyway pass both "
            "tokenizers, tokenizer=<the target's> and assistant_tokenizer=<the draft's>, "
            "or pick a draft from the same model family"
        )


def text_pair(
    target: ModelAdapter, draft: ModelAdapter | None, tokenizer: Any, assistant_tokenizer: Any
) -> tuple[Any, Any] | None:
    """(tokenizer, assistant_tokenizer) when the draft drafts through text, its vocabulary
    being another than the target's; None when it proposes target ids itself (no
    assistant_tokenizer, or the same tokens). IncompatibleModelsError for tokenizers that
    cannot serve: a missing one, or one with more tokens than its model has logits."""
    if draft is None or assistant_tokenizer is None:
        return None
    if tokenizer is None:
        raise IncompatibleModelsError(
            "assistant_tokenizer= was given without tokenizer=: a draft with another tokenizer "
            "needs both, tokenizer=<the target's> and assistant_tokenizer=<the draft's>"
        )
    _check_tokenizer("tokenizer", tokenizer, target, "target")
    _check_tokenizer("assistant_tokenizer", assistant_tokenizer, draft, "draft")
    if target.vocab_size == draft.vocab_size and (
        tokenizer is assistant_tokenizer or tokenizer.get_vocab() == assistant_tokenizer.get_vocab()
    ):
        return None  # one vocabulary: the draft proposes the target's ids directly
    if target.is_encoder_decoder or draft.is_encoder_decoder:
        raise UnsupportedOptionError(
            "a draft with another tokenizer pairs decoder-only models for now: pick a draft "
            "that shares the encoder-decoder target's tokenizer"
        )
    _check_round_trip("tokenizer", tokenizer)
    _check_round_trip("assistant_tokenizer", assistant_tokenizer)
    return tokenizer, assistant_tokenizer


ROUND_TRIP_TEXT = "The quick brown fox, naïve café."  # capitals, accents, punctuation


def _check_round_trip(name: str, tokenizer: Any) -> None:
    """IncompatibleModelsError for a tokenizer whose decode does not give back the text it
    encoded (lowercasing, accents stripped, unknown characters): text passes between the
    two vocabularies, so it must survive a round trip through each."""
    ids = tokenizer.encode(ROUND_TRIP_TEXT, add_special_tokens=False)
    back = tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    if back.strip() != ROUND_TRIP_TEXT:
        raise IncompatibleModelsError(
            f"{name}= does not give back the text it encodes ({ROUND_TRIP_TEXT!r} comes back "
            f"as {back!r}): a draft with another tokenizer passes text between the two, so "
            "both must decode what they encode (no lowercasing, accent stripping or unknown "
            "tokens); pick a draft whose tokenizer does, or one that shares the target's"
        )


def _check_tokenizer(name: str, tokenizer: Any, model: ModelAdapter, whose: str) -> None:
    """A transformers tokenizer with no more tokens than `model` has logits."""
    if not all(hasattr(tokenizer, a) for a in ("encode", "decode", "get_vocab", "__len__")):
        raise ConfigError(
            f"{name}= must be a transformers tokenizer (AutoTokenizer.from_pretrained(...)), "
            f"got a {type(tokenizer).__name__}"
        )
    if model.vocab_size and len(tokenizer) > model.vocab_size:
        raise IncompatibleModelsError(
            f"{name}= has {len(tokenizer)} tokens but the {whose} model's vocabulary has "
            f"{model.vocab_size}: pass the {whose}'s own tokenizer as {name}="
        )


CROSS_TOKENIZER_METHODS = ("auto", "string", "intersection")


def cross_tokenizer_method(method: str, do_sample: bool) -> str:
    """How a draft with another tokenizer drafts: "string" (through text, greedy only) or
    "intersection" (over the tokens both tokenizers share); "auto" takes "intersection"
    when sampling, else "string"."""
    if method not in CROSS_TOKENIZER_METHODS:
        raise ConfigError(
            f"cross_tokenizer={method!r} is not a method: pass one of "
            + ", ".join(repr(m) for m in CROSS_TOKENIZER_METHODS)
        )
    if method == "auto":
        return "intersection" if do_sample else "string"
    return method


def check_text_options(
    texts: tuple[Any, Any] | None, do_sample: bool, method: str = "auto"
) -> str | None:
    """The method a draft with another tokenizer drafts by (cross_tokenizer_method), None
    without such a draft. UnsupportedOptionError for what such a draft does not do (yet)."""
    method = cross_tokenizer_method(method, do_sample)
    if texts is None:
        return None
    if do_sample and method == "string":
        raise UnsupportedOptionError(
            "a draft with another tokenizer drafting through text (cross_tokenizer='string') "
            "is greedy only: pass cross_tokenizer='intersection' to sample (the draft proposes "
            "the tokens both tokenizers share), or do_sample=False"
        )
    return method


def check_lengths(
    adapters: Iterable[ModelAdapter], prompt_tokens: int, max_new_tokens: int
) -> None:
    """Raises InputError when the tokens to process exceed a model's context.

    Decoder-only: prompt + max_new_tokens. Encoder-decoder: the prompt (encoder input) and the
    decoder sequence, 1 (start token) + max_new_tokens, each against `max_length`.
    """
    for adapter in adapters:
        if adapter.max_length is None:
            continue
        if adapter.is_encoder_decoder:
            if prompt_tokens > adapter.max_length:
                raise InputError(
                    f"the prompt ({prompt_tokens} tokens) exceeds the encoder's "
                    f"{adapter.max_length} positions: shorten the prompt"
                )
            if 1 + max_new_tokens > adapter.max_length:
                raise _context_error(
                    f"the decoder start token + {{name}} ({max_new_tokens}) exceeds the "
                    f"decoder's {adapter.max_length} positions: lower {{name}} to "
                    f"{adapter.max_length - 1}"
                )
            continue
        if prompt_tokens + max_new_tokens > adapter.max_length:
            room = adapter.max_length - prompt_tokens
            fix = f"shorten the prompt or lower {{name}} to {room}"
            if room < 1:  # no new token fits: only a shorter prompt helps
                fix = f"shorten the prompt to at most {adapter.max_length - 1} tokens"
            raise _context_error(
                f"prompt ({prompt_tokens} tokens) + {{name}} ({max_new_tokens}) exceeds "
                f"the model's context of {adapter.max_length} tokens: {fix}"
            )


def _context_error(template: str) -> InputError:
    """An InputError whose `{name}` is max_new_tokens in Python and --max-new-tokens on the
    command line."""
    return InputError(
        template.format(name="max_new_tokens"),
        cli_message=template.format(name="--max-new-tokens"),
    )


def check_token_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """Raises InputError when a prompt token id is outside the vocabulary."""
    if vocab_size and (int(input_ids.max()) >= vocab_size or int(input_ids.min()) < 0):
        raise InputError(
            f"prompt token ids must lie in [0, {vocab_size}); got ids from "
            f"{int(input_ids.min())} to {int(input_ids.max())}: was it tokenized with "
            "another model's tokenizer?"
        )


def eos_ids(eos_token_id: int | list[int] | None, model: Any) -> tuple[int, ...]:
    """EOS ids from the argument, else from the target's generation config, else none."""
    if eos_token_id is None:
        generation_config = getattr(model, "generation_config", None)
        eos_token_id = getattr(generation_config, "eos_token_id", None)
    if eos_token_id is None:
        return ()
    ids = eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
    try:
        if any(isinstance(t, bool) for t in ids):
            raise TypeError("a bool is not a token id")
        return tuple(operator.index(t) for t in ids)
    except TypeError:
        raise ConfigError(
            f"eos_token_id must be a token id or a list of token ids, got {eos_token_id!r}: "
            "pass tokenizer.eos_token_id, or tokenizer.convert_tokens_to_ids(text)"
        ) from None


def warn_unfeasible_lengths(
    min_length: int | None, min_new_tokens: int | None, max_new_tokens: int, input_length: int
) -> None:
    """transformers' warning when the minimum length exceeds the maximum (generation then
    stops at the maximum, as there)."""
    maximum = input_length + max_new_tokens
    if min_new_tokens is not None and input_length + min_new_tokens > maximum:
        warnings.warn(
            f"Unfeasible length constraints: `min_new_tokens` ({min_new_tokens}), when added "
            f"to the prompt length ({input_length}), is larger than the maximum possible "
            f"length ({maximum}). Generation will stop at the defined maximum length. You "
            "should decrease the minimum length and/or increase the maximum length.",
            UserWarning,
            stacklevel=4,
        )
    elif min_length is not None and min_length > maximum:
        warnings.warn(
            f"Unfeasible length constraints: `min_length` ({min_length}) is larger than the "
            f"maximum possible length ({maximum}). Generation will stop at the defined "
            "maximum length. You should decrease the minimum length and/or increase the "
            "maximum length.",
            UserWarning,
            stacklevel=4,
        )


def check_attention_mask(attention_mask: Any, input_ids: torch.Tensor) -> None:
    """Accepts None or an all-ones mask of the prompt's shape; refuses padding."""
    if attention_mask is None:
        return
    mask = _as_mask(attention_mask)
    if mask.dim() == 1:
        mask = mask.unsqueeze(0)
    if tuple(mask.shape) != tuple(input_ids.shape):
        raise InputError(
            f"attention_mask has shape {tuple(mask.shape)} but input_ids {tuple(input_ids.shape)}"
            ": pass the mask the tokenizer returned with these input_ids"
        )
    if not bool((mask == 1).all()):
        raise UnsupportedOptionError(
            "attention_mask masks padding, but dynaspec decodes one unpadded sequence: drop "
            "the padded positions (input_ids[:, attention_mask[0].bool()]) or tokenize the "
            "prompt alone, without padding"
        )


def _as_mask(attention_mask: Any) -> torch.Tensor:
    """The mask as a tensor of 0 (padding) and 1 (token), or InputError."""
    try:
        mask = torch.as_tensor(attention_mask)
    except (TypeError, ValueError, RuntimeError):
        mask = None
    if mask is None or mask.dtype.is_complex:
        got = f"a {type(attention_mask).__name__}"
    elif not bool(((mask == 0) | (mask == 1)).all()):
        got = "values other than 0 and 1"
    else:
        return mask
    raise InputError(
        f"attention_mask must hold 0 (padding) and 1 (token) only, got {got}: pass the mask "
        "the tokenizer returned with these input_ids, or none"
    )


def check_batch(
    input_ids: torch.Tensor, attention_mask: Any, pad_token_id: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A (B, T) batch and its (B, T) mask, left-padded as transformers pads for generation;
    InputError or UnsupportedOptionError with the fix otherwise."""
    if input_ids.dtype not in (torch.long, torch.int):
        raise InputError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
    if input_ids.shape[1] == 0:
        raise InputError("the prompts are empty: give at least one token per row")
    ids = input_ids.long()
    if attention_mask is None:
        if isinstance(pad_token_id, int) and bool((ids[:, 0] == pad_token_id).any()):
            raise InputError(
                "a row of input_ids starts with pad_token_id but no attention_mask was given: "
                "pass the attention_mask the tokenizer returned with the padded batch"
            )
        return ids, torch.ones_like(ids)
    mask = _as_mask(attention_mask).to(ids.device)
    if tuple(mask.shape) != tuple(ids.shape):
        raise InputError(
            f"attention_mask has shape {tuple(mask.shape)} but input_ids {tuple(ids.shape)}: "
            "pass the mask the tokenizer returned with these input_ids"
        )
    mask = mask.long()
    if not bool(mask.any(dim=1).all()):
        empty = int((~mask.bool().any(dim=1)).nonzero()[0, 0])
        raise InputError(f"row {empty} of input_ids is all padding: give every row a token")
    if bool((mask[:, 1:] < mask[:, :-1]).any()):
        raise UnsupportedOptionError(
            "the batch is padded on the right: generation needs left padding, as in "
            'transformers: tokenizer.padding_side = "left", then tokenize the prompts again'
        )
    return ids, mask


# ---------------------------------------------------------------------------------------
# Generation keywords: each value of the type compat/keywords.py declares
# ---------------------------------------------------------------------------------------

_WORDS = {int: ("an int", "ints"), float: ("a number", "numbers"), str: ("a string", "strings")}
_WORDS[bool] = ("True or False", "bools")


class _Mismatch(Exception):
    """A value is not of the declared type."""


def type_words(type_: Any, plural: bool = False) -> str:
    """A keyword's type in words: list[int] -> "a list of ints"."""
    origin, args = typing.get_origin(type_), typing.get_args(type_)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_words(arg, plural) for arg in args)
    if origin is list:
        return f"{'lists' if plural else 'a list'} of {type_words(args[0], True)}"
    if origin is tuple:
        inner = ", ".join(type_words(arg).split()[-1] for arg in args)
        return f"{'tuples' if plural else 'a tuple'} ({inner})"
    return _WORDS.get(type_, ("anything", "anything"))[1 if plural else 0]


def _plain(value: Any, type_: Any) -> Any:
    """`value` as a plain Python value of `type_` (numpy and 0-d tensor numbers become int or
    float, tuples of a list type lists), or _Mismatch."""
    origin, args = typing.get_origin(type_), typing.get_args(type_)
    if type_ is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        for arg in args:
            try:
                return _plain(value, arg)
            except _Mismatch:
                continue
        raise _Mismatch
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)) or (origin is tuple and len(value) != len(args)):
            raise _Mismatch
        items = args * len(value) if origin is list else args
        return type(value)(_plain(item, arg) for item, arg in zip(value, items, strict=False))
    if type_ is bool:
        if value is True or value is False or type(value).__name__ == "bool_":
            return bool(value)
        raise _Mismatch
    if isinstance(value, (bool, str, bytes)) or getattr(value, "dtype", None) == torch.bool:
        if type_ is str and isinstance(value, str):
            return value
        raise _Mismatch
    return _number(value, type_)


def _number(value: Any, type_: Any) -> Any:
    try:
        if type_ is int:
            return operator.index(value)
        if type_ is float and (isinstance(value, numbers.Real) or _is_scalar_tensor(value)):
            number = float(value)
            if number == number:  # not NaN, which no keyword means
                return number
    except (TypeError, ValueError, RuntimeError):
        pass
    raise _Mismatch


def _is_scalar_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.numel() == 1 and value.dim() == 0


def _type_message(name: str, value: Any, type_: Any, origin: Mapping[str, str]) -> str:
    """The message: "top_k must be an int (None: unset), got 'x' (a str)", and who set it."""
    where = origin.get(name, "")[len(f"{name}={value!r}") :]  # " (set by ...)" or ""
    words = type_words(type_)
    hint = ""
    if name in TOKEN_KEYWORDS:  # ids of the target's tokenizer
        words = words.replace("an int", "a token id").replace("ints", "token ids")
        hint = "; e.g. tokenizer.eos_token_id or tokenizer.convert_tokens_to_ids(text)"
    kind = type(value).__name__
    return f"{name} must be {words} (None: unset), got {value!r} (a {kind}){where}{hint}"


def check_keyword_types(
    values: Mapping[str, Any], types_: Mapping[str, Any], origin: Mapping[str, str]
) -> dict[str, Any]:
    """The keyword values as plain Python values of their declared types (None stays None),
    or ConfigError naming the keyword, what it must be, and who set it (`origin`)."""
    checked = dict(values)
    for name, value in values.items():
        if value is None or name not in types_:
            continue
        try:
            checked[name] = _plain(value, types_[name])
        except _Mismatch:
            raise ConfigError(_type_message(name, value, types_[name], origin)) from None
    return checked


# Keywords whose values are token ids of the target's vocabulary.
TOKEN_KEYWORDS = (
    "eos_token_id",
    "forced_bos_token_id",
    "forced_eos_token_id",
    "suppress_tokens",
    "begin_suppress_tokens",
    "bad_words_ids",
    "sequence_bias",
)


def _token_ids(value: Any) -> list[int]:
    """The ints in a (nested) list of token ids."""
    if isinstance(value, (list, tuple)):
        return [token for item in value for token in _token_ids(item)]
    return [value] if isinstance(value, int) and not isinstance(value, bool) else []


def _bias_entries(value: Any) -> list[tuple[Any, Any]]:
    """sequence_bias as (token ids, bias) pairs: a dict {ids: bias} or a list [[ids, bias]];
    a malformed value gives what it can (transformers' own check names the rest)."""
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        return [tuple(item) for item in value if isinstance(item, (list, tuple)) and len(item) == 2]
    return []


def check_token_keywords(
    values: Mapping[str, Any], origin: Mapping[str, str], vocab_size: int
) -> None:
    """ConfigError for a token id outside [0, vocab_size) in a keyword that holds token ids,
    or a sequence_bias that is NaN or +inf (which no distribution survives)."""
    for name in TOKEN_KEYWORDS:
        value = values.get(name)
        entries = _bias_entries(value) if name == "sequence_bias" else [(value, 0.0)]
        for ids, bias in entries:
            if isinstance(bias, numbers.Real) and not bias < math.inf:
                raise ConfigError(
                    f"{origin[name]} holds the bias {bias}: pass finite biases, or -inf to "
                    "forbid a sequence"
                )
            bad = [t for t in _token_ids(ids) if vocab_size and not 0 <= t < vocab_size]
            if bad:
                raise ConfigError(
                    f"{origin[name]} holds token id {bad[0]}, outside the target's vocabulary "
                    f"[0, {vocab_size}): pass ids of the target's tokenizer (e.g. "
                    "tokenizer.convert_tokens_to_ids(...))"
                )
