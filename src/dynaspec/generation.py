"""The public entry: `dynaspec.generate` builds the policy and the draft source from the
caller's arguments (transformers' names) and hands them to the loop in `dynaspec.core`."""

from __future__ import annotations

from typing import Any

import torch

from dynaspec.backends import as_adapter
from dynaspec.core.config import DEFAULT_SCHEDULE, LimitsConfig, SamplingConfig, SpecConfig
from dynaspec.core.loop import GenerateOutput, decode
from dynaspec.core.protocols import LookaheadPolicy
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.validation import (
    check_lengths,
    check_pair,
    check_prompt,
    check_token_ids,
    eos_ids,
)
from dynaspec.drafters import ModelDrafter
from dynaspec.policies import make_policy

__all__ = ["GenerateOutput", "generate"]


def generate(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int = 128,
    num_assistant_tokens: int = 20,
    assistant_confidence_threshold: float = 0.4,
    num_assistant_tokens_schedule: str = DEFAULT_SCHEDULE,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    eos_token_id: int | list[int] | None = None,
    streamer: Any = None,
    policy: LookaheadPolicy | None = None,
) -> GenerateOutput:
    """Generates up to `max_new_tokens` tokens with `target`, drafted by `draft`.

    The output is exactly the target's own: greedy output equals
    `target.generate(input_ids, do_sample=False, max_new_tokens=N)` token for token, and
    sampled output follows the target's processed distribution (speculative sampling).
    `draft=None` decodes with the target alone through the same code.

    Parameter names follow transformers' assisted generation. The default schedule is
    "adaptive" (cost-aware: it drafts only while its measured costs say drafting pays);
    "dynamic" is the published confidence rule, transformers' default. `policy` overrides the
    schedule with a policy object the caller owns; it is not reset, so what it learned
    carries over between calls (call `policy.reset()` to start afresh).
    """
    spec = SpecConfig(
        num_assistant_tokens=num_assistant_tokens,
        assistant_confidence_threshold=assistant_confidence_threshold,
        num_assistant_tokens_schedule=num_assistant_tokens_schedule,
    )
    sampling = SamplingConfig(
        do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed
    )
    limits = LimitsConfig(
        max_new_tokens=max_new_tokens, eos_token_ids=eos_ids(eos_token_id, target)
    )
    prompt = check_prompt(input_ids)
    target_adapter = as_adapter(target)
    draft_adapter = as_adapter(draft) if draft is not None else None
    check_pair(target_adapter, draft_adapter)
    check_token_ids(prompt, target_adapter.vocab_size)
    models = [target_adapter] + ([draft_adapter] if draft_adapter is not None else [])
    check_lengths(models, prompt.shape[1], limits.max_new_tokens)
    if policy is None:
        policy = make_policy(spec)
        policy.reset()
    sampler = TokenSampler(sampling, device=prompt.device)
    with torch.inference_mode():
        drafter = ModelDrafter(draft_adapter) if draft_adapter is not None else None
        return decode(target_adapter, drafter, prompt, policy, sampler, limits, streamer)
