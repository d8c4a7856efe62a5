"""Processed scores: a row of logits through the logits processors with its own prefix.

A processor depends on the sequence so far, so a row of logits is processed with the prefix
of its own position: row i of the target's (k + 1, V) verification logits sees the committed
tokens plus the first i drafted tokens, and the draft's proposal of token i sees the same
prefix. That is what transformers' assisted generation does, and what makes greedy output
equal `target.generate(...)` and speculative sampling compare the two processed
distributions. The lists themselves are built from transformers' keywords by
compat/processing.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers.generation import logits_process as lp

from dynaspec.errors import NumericalError, one_line

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
