"""transformers' logits processors, warpers and stopping criteria, applied position by position.

The lists are built from transformers' own classes, in the order and under the conditions of
transformers' `generate()` (5.x, `GenerationMixin._get_logits_processor`), as the table of
keywords (core/keywords.py) gives them: the processors, then the caller's `logits_processor`
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
    StoppingCriteria,
    StopStringCriteria,
)

from dynaspec.core.config import LimitsConfig, OutputConfig, ProcessorConfig, SamplingConfig
from dynaspec.core.keywords import LAST, PROCESSORS, WARPERS, BuildContext, of_stage
from dynaspec.errors import ConfigError, NumericalError, UnsupportedOptionError, one_line

# Processors that look at the scores only (not input_ids): one call serves every row. A new
# one belongs here for speed only: given the tokens, the row-by-row path is just as exact.
ROW_INDEPENDENT = (
    lp.TemperatureLogitsWarper,
    lp.TopKLogitsWarper,
    lp.TopPLogitsWarper,
    lp.TopHLogitsWarper,
    lp.MinPLogitsWarper,
    lp.TypicalLogitsWarper,
    lp.EpsilonLogitsWarper,
    lp.EtaLogitsWarper,
    lp.SuppressTokensLogitsProcessor,
    lp.InfNanRemoveLogitsProcessor,
    lp.LogitNormalization,
)

# Processors that run a model themselves or keep state across calls: a draft's proposal and
# a rolled-back verification would see them out of step.
REFUSED = {
    lp.ClassifierFreeGuidanceLogitsProcessor: "classifier-free guidance runs the model itself",
    lp.UnbatchedClassifierFreeGuidanceLogitsProcessor: "classifier-free guidance runs the model",
    lp.WatermarkLogitsProcessor: "watermarking keeps state across calls",
    lp.SynthIDTextWatermarkLogitsProcessor: "watermarking keeps state across calls",
}


def _make(keyword: str, value: Any, factory: Any, *args: Any, **kwargs: Any) -> Any:
    """factory(*args, **kwargs); transformers' ValueError (or the KeyError, IndexError of its
    checks on a malformed value) becomes a ConfigError naming `keyword`."""
    try:
        return factory(*args, **kwargs)
    except (ValueError, TypeError, KeyError, IndexError) as err:
        raise ConfigError(f"{keyword}={value!r} is invalid: {err}") from err


def _build(stage: str, context: BuildContext) -> list[Any]:
    """The processors of the table's `stage` whose condition holds, in transformers' order."""
    built = []
    for keyword in of_stage(stage):
        value = keyword.value(context)
        if keyword.active(value, context):
            built.append(_make(keyword.name, value, keyword.build, value, context))
    return built


def build_warpers(sampling: SamplingConfig) -> list[Any]:
    """The sampling warpers, in transformers' order and conditions (none when greedy)."""
    if not sampling.do_sample:
        return []
    return _build(WARPERS, BuildContext(sampling))


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
    return _build(PROCESSORS, context)


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
        + _build(LAST, BuildContext(config))
    )


def apply_processors(
    processors: Sequence[Any],
    logits: torch.Tensor,
    tokens: torch.Tensor | None,
    drafted: torch.Tensor | Sequence[torch.Tensor] | None,
) -> torch.Tensor:
    """(n, V) logits -> (n, V) float32 processed scores.

    Row i sees the committed `tokens` (L,) plus the first len(drafted) - n + 1 + i drafted
    tokens: for the target's k + 1 verification rows, drafted[:i]; for a draft's single row,
    everything drafted so far. Without `tokens`, only row-independent processors may run.
    """
    scores = logits.to(torch.float32, copy=True)  # processors may write in place
    if all(type(p) in ROW_INDEPENDENT for p in processors):
        for processor in processors:
            scores = _call(processor, None, scores)
        return scores
    if tokens is None:
        raise ValueError("these logits processors need the sequence so far (tokens=)")
    if drafted is None or len(drafted) == 0:
        drafted = tokens.new_empty(0)
    elif not isinstance(drafted, torch.Tensor):
        drafted = torch.stack(list(drafted))
    sequence = torch.cat([tokens, drafted.to(tokens.device)])[None]  # (1, L + k)
    first = sequence.shape[1] - scores.shape[0] + 1  # prefix length of row 0
    rows = []
    for index in range(scores.shape[0]):
        row = scores[index : index + 1]  # (1, V)
        for processor in processors:
            row = _call(processor, sequence[:, : first + index], row)
        rows.append(row)
    return torch.cat(rows)  # (n, V)


def _call(processor: Any, input_ids: torch.Tensor | None, scores: torch.Tensor) -> torch.Tensor:
    """processor(input_ids, scores); Python's float overflow inside it (a huge factor or
    exponent, e.g. exponential_decay_length_penalty's) becomes a NumericalError naming it."""
    try:
        return processor(input_ids, scores)
    except OverflowError as error:
        raise NumericalError(
            f"{type(processor).__name__} overflowed ({one_line(error)}): the value passed to "
            "it is too large; pass a smaller one"
        ) from error


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


def _triggered(criterion: Any, prefix: torch.Tensor, scores: Any) -> bool:
    return bool(torch.as_tensor(criterion(prefix, scores)).any())


class Emission:
    """Per emitted token: the stopping criteria, and the scores/logits rows to return.

    `emit` is called once per round with the new tokens (already cut at EOS and length); it
    cuts them after the first token at which a criterion triggers and records one (1, V) row
    of processed scores and of raw logits per token kept, as transformers' generate returns.
    """

    def __init__(self, criteria: Sequence[StoppingCriteria | Any], outputs: OutputConfig) -> None:
        self.criteria = list(criteria)
        self.outputs = outputs
        self.scores: tuple[torch.Tensor, ...] = ()
        self.logits: tuple[torch.Tensor, ...] = ()

    @classmethod
    def needed(cls, criteria: Sequence[Any], outputs: OutputConfig) -> Emission | None:
        """An Emission when there is something to check or collect, else None (fast path)."""
        if criteria or outputs.output_scores or outputs.output_logits:
            return cls(criteria, outputs)
        return None

    def emit(
        self,
        tokens: torch.Tensor,
        new_tokens: torch.Tensor,
        scores: torch.Tensor,
        logits: torch.Tensor,
    ) -> tuple[torch.Tensor, bool]:
        """tokens: (L,) committed before the round; new_tokens: (m,); scores/logits: rows
        0..m-1 chose new_tokens[0..m-1]. Returns (the tokens kept, whether a criterion hit)."""
        count = new_tokens.numel()
        rows = tuple(scores[i : i + 1].float() for i in range(count))
        stopped = False
        if self.criteria:
            sequence = torch.cat([tokens, new_tokens])[None]  # (1, L + m)
            for index in range(count):
                so_far = self.scores + rows[: index + 1] if self.outputs.output_scores else None
                prefix = sequence[:, : tokens.numel() + index + 1]
                if any(_triggered(criterion, prefix, so_far) for criterion in self.criteria):
                    count, stopped = index + 1, True
                    break
        if self.outputs.output_scores:
            self.scores += rows[:count]
        if self.outputs.output_logits:
            self.logits += tuple(logits[i : i + 1].float() for i in range(count))
        return new_tokens[:count], stopped

    def results(self) -> tuple[tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...] | None]:
        """(scores, logits) as GenerateOutput carries them: None where not asked for."""
        return (
            self.scores if self.outputs.output_scores else None,
            self.logits if self.outputs.output_logits else None,
        )
