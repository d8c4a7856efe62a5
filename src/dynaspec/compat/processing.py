"""transformers' logits processors, warpers and stopping criteria, applied position by position.

The lists are built from transformers' own classes, in the order and under the conditions of
transformers' `generate()` (5.x, `GenerationMixin._get_logits_processor`), as the table of
keywords (compat/keywords.py) gives them: the processors, then the caller's `logits_processor`
objects (one of a type already built replaces it in place, as in transformers), then, when
sampling, the warpers (temperature, top-h, top-k, top-p, min-p, typical, epsilon, eta), then
`LogitNormalization`.

A processor depends on the sequence so far, so a row of logits is processed with the prefix
of its own position: row i of the target's (k + 1, V) verification logits sees the committed
tokens plus the first i drafted tokens, and the draft's proposal of token i sees the same
prefix. That is what transformers' assisted generation does, and what makes greedy output
equal `target.generate(...)` and speculative sampling compare the two processed
distributions. Stopping criteria are checked at every emitted token, as if the tokens had
come one at a time, so generation ends exactly where they trigger, even inside an accepted
draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.generation import logits_process as lp
from transformers.generation.stopping_criteria import (
    MaxTimeCriteria,
    StopStringCriteria,
)

from dynaspec.compat.keywords import LAST, PROCESSORS, BuildContext, build_stage
from dynaspec.compat.records import ProcessorConfig, SamplingConfig
from dynaspec.core.config import LimitsConfig
from dynaspec.errors import ConfigError, UnsupportedOptionError

# Processors that run a model themselves or keep state across calls: a draft's proposal and
# a rolled-back verification would see them out of step.
REFUSED = {
    lp.ClassifierFreeGuidanceLogitsProcessor: "classifier-free guidance runs the model itself",
    lp.UnbatchedClassifierFreeGuidanceLogitsProcessor: "classifier-free guidance runs the model",
    lp.WatermarkLogitsProcessor: "watermarking keeps state across calls",
    lp.SynthIDTextWatermarkLogitsProcessor: "watermarking keeps state across calls",
}


def build_warpers(sampling: SamplingConfig) -> list[Any]:
    """The sampling warpers, in transformers' order and conditions (none when greedy)."""
    return sampling.warpers()


def build_processors(
    config: ProcessorConfig,
    prompt: torch.Tensor,
    input_length: int,
    max_new_tokens: int,
    eos_token_ids: tuple[int, ...],
    pads: int = 0,
) -> list[Any]:
    """The logits processors of `config`, in transformers' order and conditions.

    prompt: (1, T) the encoder's input (decoder-only: the prompt), for the encoder_* ones;
    input_length: tokens the decoder starts from, against which lengths count; pads: the
    prompt's left padding (a batch row), which transformers' repetition penalty skips.
    """
    device = prompt.device
    eos = torch.tensor(eos_token_ids, dtype=torch.long, device=device) if eos_token_ids else None
    length = input_length + max_new_tokens
    context = BuildContext(config, prompt, input_length, length, eos, device, pads)
    return build_stage(PROCESSORS, context)


def merge_custom(defaults: list[Any], custom: Sequence[Any] | None) -> list[Any]:
    """transformers' merge: a custom object of a type already built replaces it in place;
    the other custom objects follow the built ones."""
    custom = list(custom or [])
    for processor in custom:
        reason = REFUSED.get(type(processor))
        if reason is not None:
            raise UnsupportedOptionError(
                f"{type(processor).__name__} cannot be used with speculative decoding: "
                f"{reason}; use target.generate(...) for it"
            )
    merged = []
    for default in defaults:
        same = [p for p in custom if type(p) is type(default)]
        merged.append(same[0] if same else default)
    merged += [p for p in custom if p not in merged]
    return merged


def full_processor_list(
    sampling: SamplingConfig,
    config: ProcessorConfig,
    custom: Sequence[Any] | None,
    prompt: torch.Tensor,
    input_length: int,
    limits: LimitsConfig,
    pads: int = 0,
) -> list[Any]:
    """Processors, the caller's objects, warpers, then LogitNormalization: transformers' order.
    pads: the prompt's left padding (a batch row)."""
    processors = build_processors(
        config, prompt, input_length, limits.max_new_tokens, limits.eos_token_ids, pads
    )
    return (
        merge_custom(processors, custom)
        + build_warpers(sampling)
        + build_stage(LAST, BuildContext(config))
    )


def build_stopping(
    limits: LimitsConfig, tokenizer: Any, custom: Sequence[Any] | None, started: float
) -> list[Any]:
    """max_time, stop strings and the caller's criteria (EOS and length are the loop's own).

    started: time.time() at the start of the call, from which max_time counts.
    """
    criteria: list[Any] = []
    if limits.max_time is not None:
        criteria.append(MaxTimeCriteria(limits.max_time, initial_timestamp=started))
    if limits.stop_strings:
        if tokenizer is None:
            raise ConfigError(
                f"stop_strings {list(limits.stop_strings)} need the tokenizer: pass "
                "tokenizer=<the target's tokenizer> to generate()"
            )
        criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=limits.stop_strings))
    for criterion in custom or []:
        if not callable(criterion):
            raise ConfigError(f"stopping_criteria must hold callables, got {criterion!r}")
        criteria.append(criterion)
    return criteria


def short_name(obj: Any) -> str:
    """A processor's or criterion's class name without transformers' suffixes."""
    name = type(obj).__name__
    for suffix in ("LogitsProcessor", "LogitsWarper", "Criteria"):
        if name.endswith(suffix) and name != suffix:
            return name[: -len(suffix)]
    return name
