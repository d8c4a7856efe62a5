"""Checks that turn bad input into a typed error before any model runs."""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from dynaspec.core.protocols import LookaheadPolicy, ModelAdapter
from dynaspec.errors import (
    ConfigError,
    IncompatibleModelsError,
    InputError,
    NumericalError,
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
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError(f"seed must be an int (e.g. seed=0) or None, got {seed!r}")
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
            "the draft must share the target's tokenizer (universal assisted decoding across "
            "tokenizers is not supported yet); pick a draft from the same model family"
        )


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
    mask = torch.as_tensor(attention_mask)
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
    mask = torch.as_tensor(attention_mask).to(ids.device)
    if tuple(mask.shape) != tuple(ids.shape):
        raise InputError(
            f"attention_mask has shape {tuple(mask.shape)} but input_ids {tuple(ids.shape)}: "
            "pass the mask the tokenizer returned with these input_ids"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise InputError("attention_mask must hold 0 (padding) and 1 (token) only")
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


def check_finite(finite: bool, model: Any) -> None:
    """Raises NumericalError when a model's logits were not all finite (`finite` False)."""
    if finite:
        return
    name = getattr(model, "name", None) or type(getattr(model, "model", model)).__name__
    raise NumericalError(
        f"{name} produced NaN/inf logits; check the weights and the dtype (float16 on CPU "
        "overflows: use bfloat16 or float32)"
    )
