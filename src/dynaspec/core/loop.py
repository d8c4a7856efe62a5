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
from dynaspec.core.drafting import draft_alone
from dynaspec.core.emission import Emission
from dynaspec.core.finite import require_finite
from dynaspec.core.keyed import coupled_accept
from dynaspec.core.protocols import Drafter, LookaheadPolicy, ModelAdapter
from dynaspec.core.round import DraftPlan, Proposal, Round, StopReason
from dynaspec.core.row import Row
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.stats import GenerationStats
from dynaspec.core.timing import device_clock
from dynaspec.core.verify import greedy_accept, speculative_sample


@dataclass
class GenerateOutput:
    """Result of generate()."""

    sequences: torch.Tensor  # (1, T + new): prompt then new tokens (encoder-decoder: decoder
    #                          start token then new tokens), like transformers' generate
    stats: GenerationStats  # per-round records; .summary() for totals
    scores: tuple[torch.Tensor, ...] | None = None  # output_scores: (1, V) processed per token
    logits: tuple[torch.Tensor, ...] | None = None  # output_logits: (1, V) raw per token
    # A batch (input_ids (B, T)): each row's own stats, in row order (None for one sequence)
    row_stats: tuple[GenerationStats, ...] | None = None


@dataclass(frozen=True)
class Checked:
    """A round after the target's check, before the loop cuts and commits its tokens."""

    plan: DraftPlan  # the policy's plan, cut to the room left
    proposal: Proposal  # what the drafter proposed
    stop_reason: StopReason  # why drafting stopped
    num_accepted: int  # drafted tokens the target accepted
    num_verified: int  # tokens in the target's forward
    target_time_s: float  # wall time of that forward
    new_tokens: torch.Tensor  # (num_accepted + 1,) accepted draft tokens + the target's token
    scores: torch.Tensor  # (k + 1, V) the target's processed scores; row i chose new_tokens[i]
    logits: torch.Tensor  # (k + 1, V) the target's raw logits

    def record(self, num_emitted: int, other_time_s: float) -> Round:
        """The round's one record, once the loop knows how many tokens it committed."""
        proposal = self.proposal
        return Round(
            plan=self.plan,
            stop_reason=self.stop_reason,
            num_drafted=proposal.tokens.numel(),
            num_copied=proposal.num_copied,
            num_accepted=self.num_accepted,
            num_emitted=num_emitted,
            num_verified=self.num_verified,
            agreement=proposal.agreement,
            catchup=proposal.catchup,
            draft_forwards=proposal.draft_forwards,
            confidences=proposal.confidences,
            draft_time_s=proposal.draft_time_s,
            target_time_s=self.target_time_s,
            other_time_s=other_time_s,
            guess_fed=proposal.guess_fed,
            guess_hits=proposal.guess_hits,
        )


def speculative_round(target: ModelAdapter, row: Row) -> Checked:
    """One round over the row's committed tokens: its drafter drafts at most the tokens it
    may still emit but one, and nothing after a drafted EOS (if the target accepts it,
    generation ends there), as its policy plans (`draft_alone`, the batch loop's too)."""
    plan, proposal, stop_reason = draft_alone(row)
    tokens, draft_tokens = row.committed, proposal.tokens  # (n,), (k,)
    device = getattr(target, "device", None)
    start = device_clock(device)
    verify_input = torch.cat([tokens[target.num_cached :], draft_tokens])
    target_logits = target.forward(verify_input, draft_tokens.numel() + 1)  # (k + 1, V)
    target_time = device_clock(device) - start
    return check(
        target, row.sampler, target_logits, tokens, plan, proposal, stop_reason,
        verify_input.numel(), target_time,
    )  # fmt: skip


def check(
    target: Any,
    sampler: TokenSampler,
    target_logits: torch.Tensor,
    tokens: torch.Tensor,
    plan: DraftPlan,
    proposal: Proposal,
    stop_reason: StopReason,
    num_verified: int,
    target_time_s: float,
) -> Checked:
    """The round after the target's forward over `num_verified` tokens (`target_time_s`),
    whose logits (k + 1, V) check `proposal` after the committed `tokens` (n,): finite (once
    a round), then the acceptance rule. Both loops' verification."""
    require_finite(target_logits, target)
    num_accepted, new_tokens, scores = accept(sampler, target_logits, tokens, proposal)
    return Checked(
        plan, proposal, stop_reason, num_accepted, num_verified, target_time_s, new_tokens,
        scores, target_logits,
    )  # fmt: skip


def accept(
    sampler: TokenSampler, target_logits: torch.Tensor, tokens: torch.Tensor, proposal: Proposal
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """The target's verdict on `proposal` after the committed `tokens` (n,), from its logits
    (k + 1, V): (accepted drafted tokens, the new tokens (accepted + 1,), the processed
    scores (k + 1, V))."""
    draft_tokens = proposal.tokens  # (k,)
    # Row i processed with the committed tokens + draft_tokens[:i] as the prefix.
    target_scores = sampler.process(target_logits, tokens, draft_tokens)  # (k + 1, V)
    if sampler.keyed_seed is not None:  # verification by coupling (core/keyed.py)
        target_tokens = sampler.keyed(target_scores, tokens.numel())  # (k + 1,)
        num_accepted, next_token = coupled_accept(draft_tokens, target_tokens)
    elif sampler.config.do_sample:
        num_accepted, next_token = speculative_sample(
            draft_tokens,
            proposal.probs if proposal.probs is not None else target_logits.new_empty(0),
            sampler.normalize(target_scores),
            lambda n: sampler.uniform(n, target_logits.device),
            sampler.sample,
        )
    else:
        num_accepted, next_token = greedy_accept(draft_tokens, target_scores)
    new_tokens = torch.cat([draft_tokens[:num_accepted], next_token.view(1)])
    return num_accepted, new_tokens, target_scores


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
    row = Row(
        tokens=first.new_empty(first.numel() + limits.max_new_tokens),
        pads=0,
        sampler=sampler,
        emission=emission,
        limits=limits,
        stats=GenerationStats(prompt_tokens=prompt.shape[1]),
        streamer=streamer,
        policy=policy,
        drafter=drafter,
    )
    row.begin(first)
    round_start = perf_counter()  # a round's other time includes the previous update
    while not row.done:
        step = speculative_round(target, row)
        new_tokens = row.commit(step.new_tokens, step.scores, step.logits)
        target.crop(row.length - 1)
        if drafter is not None:
            drafter.crop(row.length - 1)
        spent = perf_counter() - round_start
        record = step.record(
            new_tokens.numel(), spent - step.proposal.draft_time_s - step.target_time_s
        )
        round_start = perf_counter()
        policy.update(record)
        row.record(record, new_tokens)
    row.stats.wall_time_s = perf_counter() - started
    extras = emission.results() if emission is not None else (None, None)
    return GenerateOutput(row.committed[None], row.stats, *extras)
