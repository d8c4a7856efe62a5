"""Steps 1-3 of the oracle analysis (dynaspec.eval.oracle) for one prompt, with the real
models: the reference, the real oracle run, the draft's teacher-forced trace."""

from __future__ import annotations

from collections.abc import Sequence
from time import perf_counter
from typing import Any

import torch

from dynaspec.backends import ModelAdapter, as_adapter
from dynaspec.core.round import Round
from dynaspec.eval.oracle.methods import ORACLE_MAX_TOKENS
from dynaspec.eval.oracle.records import DraftTrace, PromptRecord
from dynaspec.generation import generate
from dynaspec.policies import OraclePolicy


def trace_draft(
    draft: ModelAdapter, input_ids: torch.Tensor, reference: torch.Tensor, num_first: int
) -> DraftTrace:
    """The draft's teacher-forced greedy token and confidence at every new-token position of
    `reference` (n,), plus one past its end, from one forward over the whole sequence.

    Greedy decoding picks the argmax of the raw logits and the loop's confidence is its
    softmax probability (no temperature or top-k/top-p in greedy mode): the same here.
    """
    with torch.inference_mode():
        draft.begin(input_ids)
        num_logits = reference.numel() - num_first + 1
        logits = draft.forward(reference, num_logits).float()  # (m + 1, V)
        draft.crop(0)
    tokens = logits.argmax(-1)  # (m + 1,)
    confidences = torch.softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]  # (m + 1,)
    return DraftTrace(tuple(tokens.tolist()), tuple(confidences.tolist()))


def measure_prompt(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    *,
    task: str,
    prompt_id: str,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    real_oracle: bool = True,
    reference_schedule: str | None = None,
) -> PromptRecord:
    """Steps 1-3 of dynaspec.eval.oracle for one prompt, with the real models.

    reference_schedule: None decodes the reference with the target alone; a schedule name
    decodes it speculatively with that schedule, which is lossless, so the text is the
    target's greedy output (each token is the target's argmax in a verification forward),
    only faster. Then reference_step_s is not a plain target step.
    """
    target_adapter = as_adapter(target)
    draft_adapter = as_adapter(draft)
    eos = list(eos_token_ids)
    reference_out = generate(
        target_adapter,
        None if reference_schedule is None else draft_adapter,
        input_ids,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        num_assistant_tokens_schedule=reference_schedule or "dynamic",
    )
    reference = reference_out.sequences[0]  # (n0 + m,)
    num_new = reference_out.stats.summary().new_tokens
    num_first = reference.numel() - num_new
    step_times = sorted(r.target_time_s for r in reference_out.stats.rounds[1:]) or [0.0]
    rounds: tuple[Round, ...] | None = None
    lossless: bool | None = None
    oracle_time = 0.0
    if real_oracle:
        oracle_out = generate(
            target_adapter,
            draft_adapter,
            input_ids,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            policy=OraclePolicy(reference.tolist(), max_tokens=ORACLE_MAX_TOKENS),
        )
        rounds = tuple(oracle_out.stats.rounds)
        lossless = torch.equal(oracle_out.sequences[0], reference)
        oracle_time = oracle_out.stats.wall_time_s
    started = perf_counter()
    trace = trace_draft(draft_adapter, input_ids, reference, num_first)
    trace_time = perf_counter() - started
    return PromptRecord(
        task=task,
        prompt_id=prompt_id,
        num_first=num_first,
        new_tokens=tuple(reference[num_first:].tolist()),
        vocab_size=target_adapter.vocab_size,
        eos_token_ids=tuple(eos),
        max_new_tokens=max_new_tokens,
        trace=trace,
        real_oracle=rounds,
        real_oracle_lossless=lossless,
        reference_time_s=reference_out.stats.wall_time_s,
        real_oracle_time_s=oracle_time,
        trace_time_s=trace_time,
        reference_step_s=step_times[len(step_times) // 2],
    )
