"""Why a greedy output left the target-alone output: a numerical tie or a bug.

docs/design/architecture.md ("Lossless in bf16: ties"): a forward over several tokens and a forward
over one can differ in the last bit, and at a tie of the target's top two logits the argmax
flips. One target forward over the prompt and the common prefix gives the logits at the
first differing position; if both differing tokens lie within a few steps of the dtype (its
eps x 2**floor(log2|top|)) of the top logit, the divergence is a ``tie``, anything else a
``BUG``. Used by `dynaspec bench` and `dynaspec generate --compare`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dynaspec.backends.hf import decoder_start_token_id
from dynaspec.core.protocols import ModelAdapter

DEFAULT_TIE_STEPS = 4.0  # "within a few bf16 steps" of the top logit: a tie


@dataclass(frozen=True)
class Divergence:
    """Where and why a method's greedy output left the target-alone output."""

    position: int  # index among the new tokens of the first difference
    target_token: int | None  # the target-alone output's token there (None: it had ended)
    method_token: int | None  # the method's token there (None: it had ended)
    top_token: int | None  # argmax of the target's logits over the common prefix
    top_logit: float | None  # its logit
    target_gap: float | None  # top_logit - logit of target_token
    method_gap: float | None  # top_logit - logit of method_token
    ulp: float | None  # one step of the model dtype at the top logit
    steps: float | None  # max(target_gap, method_gap) / ulp
    dtype: str  # the target's parameter dtype
    kind: str  # "tie" (within the tie steps) or "BUG"


def first_difference(reference: Sequence[int], output: Sequence[int]) -> int | None:
    """Index of the first position where the two token lists differ (None: identical)."""
    for index, (a, b) in enumerate(zip(reference, output, strict=False)):
        if a != b:
            return index
    if len(reference) != len(output):
        return min(len(reference), len(output))
    return None


def dtype_step(value: float, dtype: torch.dtype) -> float:
    """One step (ulp) of `dtype` at magnitude |value|: eps * 2**floor(log2|value|)."""
    eps = torch.finfo(dtype).eps
    magnitude = max(abs(value), torch.finfo(dtype).tiny)
    return eps * 2.0 ** math.floor(math.log2(magnitude))


def classify_logits(
    logits: torch.Tensor,
    position: int,
    target_token: int | None,
    method_token: int | None,
    dtype: torch.dtype,
    tie_steps: float = DEFAULT_TIE_STEPS,
) -> Divergence:
    """Classifies a divergence from the target's logits (V,) at the first differing position.

    A tie: both differing tokens are within `tie_steps` steps of `dtype` (at the top logit)
    of the top logit, so the argmax can flip with the last bit of a forward that batches a
    different number of tokens. Otherwise (a token far from the top, or one output simply
    ended or went on where the other did not) a BUG.
    """
    name = str(dtype).removeprefix("torch.")
    if target_token is None or method_token is None:
        return Divergence(
            position, target_token, method_token, None, None, None, None, None, None, name, "BUG"
        )
    values = logits.float()
    top_token = int(values.argmax())
    top_logit = float(values[top_token])
    target_gap = top_logit - float(values[target_token])
    method_gap = top_logit - float(values[method_token])
    ulp = dtype_step(top_logit, dtype)
    steps = max(target_gap, method_gap) / ulp
    kind = "tie" if steps <= tie_steps else "BUG"
    return Divergence(
        position,
        target_token,
        method_token,
        top_token,
        top_logit,
        target_gap,
        method_gap,
        ulp,
        steps,
        name,
        kind,
    )


def model_dtype(model: Any) -> torch.dtype:
    """The dtype a model (a transformers model, or an adapter with `dtype`) computes in."""
    dtype = getattr(model, "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else next(model.parameters()).dtype


def _is_encoder_decoder(model: Any) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def classify_mismatch(
    target: Any,
    input_ids: torch.Tensor,
    reference: Sequence[int],
    output: Sequence[int],
    tie_steps: float = DEFAULT_TIE_STEPS,
    dtype: str | None = None,
) -> Divergence:
    """One target forward over prompt + common prefix; classify_logits() at the divergence."""
    position = first_difference(reference, output)
    if position is None:
        raise ValueError("the outputs are identical: nothing to classify")
    torch_dtype = getattr(torch, dtype) if dtype else model_dtype(target)
    target_token = reference[position] if position < len(reference) else None
    method_token = output[position] if position < len(output) else None
    common = torch.tensor(list(reference[:position]), dtype=torch.long)
    if isinstance(target, ModelAdapter):  # a fast adapter: its own forward, as it decodes
        prefix = torch.cat([input_ids[0].cpu(), common])
        with torch.inference_mode():
            target.begin(prefix[None], max_length=prefix.numel())
            logits = target.forward(prefix, 1)[0]  # (V,)
        tokens = (position, target_token, method_token)
        found = classify_logits(logits, *tokens, torch_dtype, tie_steps)
        if getattr(target, "bit_exact", False) and found.kind == "tie":
            # a bit-exact target verifies with its steps' logits: no tie can part the outputs
            return dataclasses.replace(found, kind="BUG")
        return found
    device = next(target.parameters()).device
    with torch.inference_mode():
        if _is_encoder_decoder(target):
            start = torch.tensor([decoder_start_token_id(target)])
            decoder = torch.cat([start, common]).to(device)
            logits = target(input_ids=input_ids.to(device), decoder_input_ids=decoder[None])
        else:
            prefix = torch.cat([input_ids[0].cpu(), common]).to(device)
            logits = target(input_ids=prefix[None])
        logits = logits.logits[0, -1]  # (V,)
    return classify_logits(logits, position, target_token, method_token, torch_dtype, tie_steps)
