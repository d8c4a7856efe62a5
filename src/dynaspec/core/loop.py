"""The speculative decoding loop: draft, verify in one target forward, commit, roll back.

With no drafter the very same loop runs the target alone (every round drafts nothing), so
the baseline shares the sampling code with every speculative method. The loop receives its
policy, drafter and models as objects satisfying the protocols in `dynaspec.core.protocols`;
`dynaspec.generate` (dynaspec/generation.py) builds them from the caller's arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch

from dynaspec.core.config import LimitsConfig
from dynaspec.core.processing import Emission
from dynaspec.core.protocols import Drafter, LookaheadPolicy, ModelAdapter, Proposal, RoundResult
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.stats import GenerationStats, RoundRecord
from dynaspec.core.timing import device_clock
from dynaspec.core.validation import check_finite
from dynaspec.core.verify import greedy_accept, speculative_sample


@dataclass
class GenerateOutput:
    """Result of generate()."""

    sequences: torch.Tensor  # (1, T + new): prompt then new tokens (encoder-decoder: decoder
    #                          start token then new tokens), like transformers' generate
    stats: GenerationStats  # per-round records; .summary() for totals
    scores: tuple[torch.Tensor, ...] | None = None  # output_scores: (1, V) processed per token
    logits: tuple[torch.Tensor, ...] | None = None  # output_logits: (1, V) raw per token


@dataclass
class _Round:
    """What one round produced, before EOS/length cuts."""

    new_tokens: torch.Tensor  # (num_accepted + 1,) accepted draft tokens + the target's token
    result: RoundResult
    stop_reason: str
    scores: torch.Tensor  # (k + 1, V) the target's processed scores; row i chose new_tokens[i]
    logits: torch.Tensor  # (k + 1, V) the target's raw logits


def speculative_round(
    target: ModelAdapter,
    drafter: Drafter | None,
    tokens: torch.Tensor,
    policy: LookaheadPolicy,
    sampler: TokenSampler,
    max_draft: int,
    eos_token_ids: tuple[int, ...] = (),
) -> _Round:
    """One round over committed `tokens` (n,); drafts at most `max_draft` tokens, and
    nothing after a drafted EOS (if the target accepts it, generation ends there)."""
    wanted = 0
    if drafter is not None:  # what the policy wants drafted, of at most the tokens still to emit
        wanted = drafter.max_lookahead(tokens, policy, max_draft + 1)
    lookahead = min(wanted, max_draft)
    # "none": nothing wanted; "length": the room left cut the draft (to 0 on the last token).
    stop_reason = "none" if wanted == 0 else ("length" if wanted > max_draft else "max")
    proposal = Proposal(tokens.new_empty(0), None, (), stop_reason)
    if lookahead:
        proposal = drafter.propose(tokens, lookahead, policy, sampler, eos_token_ids)
        if proposal.stop_reason != "max":
            stop_reason = proposal.stop_reason
    draft_tokens = proposal.tokens  # (k,)
    device = getattr(target, "device", None)
    start = device_clock(device)
    verify_input = torch.cat([tokens[target.num_cached :], draft_tokens])
    target_logits = target.forward(verify_input, draft_tokens.numel() + 1)  # (k + 1, V)
    target_time = device_clock(device) - start
    check_finite(bool(torch.isfinite(target_logits).all()), target)  # once per round
    # Row i processed with the committed tokens + draft_tokens[:i] as the prefix.
    target_scores = sampler.process(target_logits, tokens, draft_tokens)  # (k + 1, V)
    if sampler.config.do_sample:
        num_accepted, next_token = speculative_sample(
            draft_tokens,
            proposal.probs if proposal.probs is not None else target_logits.new_empty(0),
            sampler.normalize(target_scores),
            lambda n: sampler.uniform(n, target_logits.device),
            sampler.sample,
        )
    else:
        num_accepted, next_token = greedy_accept(draft_tokens, target_scores)
    result = RoundResult(
        num_drafted=draft_tokens.numel(),
        num_accepted=num_accepted,
        confidences=proposal.confidences,
        draft_time_s=proposal.draft_time_s,
        target_time_s=target_time,
        num_verified=verify_input.numel(),
        draft_forwards=proposal.forwards,
        draft_catchup=proposal.catchup,
        num_lookup=proposal.num_lookup,
        lookup_match=proposal.lookup_match,
    )
    new_tokens = torch.cat([draft_tokens[:num_accepted], next_token.view(1)])
    return _Round(new_tokens, result, stop_reason, target_scores, target_logits)


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
    drafter: Drafter | None,
    prompt: torch.Tensor,
    policy: LookaheadPolicy,
    sampler: TokenSampler,
    limits: LimitsConfig,
    streamer: Any = None,
    emission: Emission | None = None,
) -> GenerateOutput:
    """Runs rounds until max_new_tokens, EOS or a stopping criterion of `emission` (which also
    collects scores/logits). Caches are cropped to committed - 1 each round."""
    started = perf_counter()
    # The most tokens a cache will hold (decoder-only: exactly; encoder-decoder: a bound).
    final_length = prompt.shape[1] + limits.max_new_tokens
    first = target.begin(prompt, max_length=final_length)  # (n0,) prompt, or start token
    if drafter is not None:
        drafter.begin(prompt, max_length=final_length)
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
            target, drafter, tokens[:length], policy, sampler, room - 1, limits.eos_token_ids
        )
        new_tokens, done = _cut(step.new_tokens, room, eos)
        if emission is not None:  # stopping criteria at each token; scores/logits to return
            new_tokens, stopped = emission.emit(
                tokens[:length], new_tokens, step.scores, step.logits
            )
            done = done or stopped
        tokens[length : length + new_tokens.numel()] = new_tokens
        length += new_tokens.numel()
        target.crop(length - 1)
        if drafter is not None:
            drafter.crop(length - 1)
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
                num_lookup=result.num_lookup,
            )
        )
    if streamer is not None:
        streamer.end()
    stats.wall_time_s = perf_counter() - started
    extras = emission.results() if emission is not None else (None, None)
    return GenerateOutput(tokens[:length][None], stats, *extras)
