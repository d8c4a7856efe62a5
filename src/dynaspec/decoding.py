"""The speculative decoding loop: draft, verify in one target forward, commit, roll back.

With `draft=None` the very same loop runs the target alone (every round drafts nothing), so
the baseline shares the sampling code with every speculative method.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch

from dynaspec.config import LimitsConfig, SamplingConfig, SpecConfig
from dynaspec.models import ModelAdapter, as_adapter
from dynaspec.policies import DraftStep, LookaheadPolicy, RoundResult, make_policy
from dynaspec.sampling import TokenSampler
from dynaspec.stats import GenerationStats, RoundRecord
from dynaspec.validation import check_lengths, check_pair, check_prompt, check_token_ids, eos_ids
from dynaspec.verify import greedy_accept, speculative_sample


@dataclass
class GenerateOutput:
    """Result of generate()."""

    sequences: torch.Tensor  # (1, T + new): prompt then new tokens (encoder-decoder: decoder
    #                          start token then new tokens), like transformers' generate
    stats: GenerationStats  # per-round records; .summary() for totals


@dataclass
class _Round:
    """What one round produced, before EOS/length cuts."""

    new_tokens: torch.Tensor  # (num_accepted + 1,) accepted draft tokens + the target's token
    result: RoundResult
    stop_reason: str


def speculative_round(
    target: ModelAdapter,
    draft: ModelAdapter | None,
    tokens: torch.Tensor,
    policy: LookaheadPolicy,
    sampler: TokenSampler,
    max_draft: int,
    eos_token_ids: tuple[int, ...] = (),
) -> _Round:
    """One round over committed `tokens` (n,); drafts at most `max_draft` tokens, and
    nothing after a drafted EOS (if the target accepts it, generation ends there)."""
    wanted = 0
    if draft is not None:  # the draft's catch-up, and the most tokens still to emit
        wanted = policy.max_lookahead(tokens.numel() - draft.num_cached, max_draft + 1)
    lookahead = min(wanted, max_draft)
    # "none": nothing wanted; "length": the room left cut the draft (to 0 on the last token).
    stop_reason = "none" if wanted == 0 else ("length" if wanted > max_draft else "max")
    drafted: list[torch.Tensor] = []
    draft_probs: list[torch.Tensor] = []
    confidences: list[float] = []
    draft_time = 0.0
    catchup = 0
    if lookahead:
        pending = tokens[draft.num_cached :]  # tokens the draft has not seen: >= the newest
        catchup = pending.numel()
        for index in range(lookahead):
            start = perf_counter()
            logits = draft.forward(pending, 1)[0]  # (V,)
            draft_time += perf_counter() - start
            probs = sampler.probs(logits[None])[0]  # (V,)
            token = sampler.pick(logits, probs)
            drafted.append(token)
            if sampler.config.do_sample:  # only speculative sampling needs the rows
                draft_probs.append(probs)
            confidences.append(float(probs[token]))
            step = DraftStep(index, tokens.numel() + index, int(token), confidences[-1])
            if step.token in eos_token_ids:
                stop_reason = "eos"
                break
            if policy.should_stop(step):
                stop_reason = policy.stop_reason
                break
            pending = token.view(1)
    draft_tokens = torch.stack(drafted) if drafted else tokens.new_empty(0)  # (k,)
    start = perf_counter()
    verify_input = torch.cat([tokens[target.num_cached :], draft_tokens])
    target_logits = target.forward(verify_input, draft_tokens.numel() + 1)  # (k + 1, V)
    target_time = perf_counter() - start
    if sampler.config.do_sample:
        num_accepted, next_token = speculative_sample(
            draft_tokens,
            torch.stack(draft_probs) if draft_probs else target_logits.new_empty(0),
            sampler.probs(target_logits),
            lambda n: sampler.uniform(n, target_logits.device),
            sampler.sample,
        )
    else:
        num_accepted, next_token = greedy_accept(draft_tokens, target_logits)
    result = RoundResult(
        num_drafted=len(drafted),
        num_accepted=num_accepted,
        confidences=tuple(confidences),
        draft_time_s=draft_time,
        target_time_s=target_time,
        num_verified=verify_input.numel(),
        draft_forwards=len(drafted),
        draft_catchup=catchup,
    )
    new_tokens = torch.cat([draft_tokens[:num_accepted], next_token.view(1)])
    return _Round(new_tokens, result, stop_reason)


def _cut(new_tokens: torch.Tensor, room: int, eos: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Keeps at most `room` tokens and nothing after the first EOS; returns (tokens, done)."""
    new_tokens = new_tokens[:room]
    done = new_tokens.numel() >= room
    if eos.numel():
        hits = torch.isin(new_tokens, eos).nonzero()
        if hits.numel():
            new_tokens = new_tokens[: int(hits[0, 0]) + 1]
            done = True
    return new_tokens, done


def decode(
    target: ModelAdapter,
    draft: ModelAdapter | None,
    prompt: torch.Tensor,
    policy: LookaheadPolicy,
    sampler: TokenSampler,
    limits: LimitsConfig,
    streamer: Any = None,
) -> GenerateOutput:
    """Runs rounds until max_new_tokens or EOS. Caches are cropped to committed - 1 each round."""
    started = perf_counter()
    first = target.begin(prompt)  # (n0,) prompt, or decoder start token
    if draft is not None:
        draft.begin(prompt)
    n0 = first.numel()
    tokens = torch.empty(n0 + limits.max_new_tokens, dtype=torch.long, device=first.device)
    tokens[:n0] = first
    length = n0
    eos = torch.tensor(limits.eos_token_ids, dtype=torch.long, device=first.device)
    stats = GenerationStats(prompt_tokens=prompt.shape[1])
    if streamer is not None:
        streamer.put(first[None].cpu())
    done = False
    while not done:
        round_start = perf_counter()
        room = limits.max_new_tokens - (length - n0)
        step = speculative_round(
            target, draft, tokens[:length], policy, sampler, room - 1, limits.eos_token_ids
        )
        new_tokens, done = _cut(step.new_tokens, room, eos)
        tokens[length : length + new_tokens.numel()] = new_tokens
        length += new_tokens.numel()
        target.crop(length - 1)
        if draft is not None:
            draft.crop(min(draft.num_cached, length - 1))
        policy.update(step.result)
        if streamer is not None:
            streamer.put(new_tokens[None].cpu())
        result = step.result
        stats.rounds.append(
            RoundRecord(
                num_drafted=result.num_drafted,
                num_accepted=result.num_accepted,
                num_emitted=new_tokens.numel(),
                stop_reason=step.stop_reason,
                draft_forwards=result.draft_forwards,
                draft_time_s=result.draft_time_s,
                target_time_s=result.target_time_s,
                other_time_s=perf_counter()
                - round_start
                - result.draft_time_s
                - result.target_time_s,
                confidences=result.confidences,
            )
        )
    if streamer is not None:
        streamer.end()
    stats.wall_time_s = perf_counter() - started
    return GenerateOutput(tokens[:length][None], stats)


def generate(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int = 128,
    num_assistant_tokens: int = 20,
    assistant_confidence_threshold: float = 0.4,
    num_assistant_tokens_schedule: str = "dynamic",
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

    Parameter names follow transformers' assisted generation. `policy` overrides the
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
        return decode(target_adapter, draft_adapter, prompt, policy, sampler, limits, streamer)
