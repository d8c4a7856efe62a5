"""The decoding loop over a batch of rows: every row drafts and is checked as it would be
alone, and the target checks all rows in one forward per round.

Rounds are ragged: each row offers, plans (its own policy), drafts and accepts its own
number of tokens, and a row that ends (EOS, its length, a stopping criterion) stops being fed
while the others go on. The verification, the acceptance rule, the cuts and the records are
those of the single-sequence loop (core/loop.py); only the forwards are shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import torch

from dynaspec.core.config import LimitsConfig
from dynaspec.core.emission import Emission
from dynaspec.core.finite import require_finite
from dynaspec.core.loop import Checked, accept, cut
from dynaspec.core.protocols import BatchDrafter, BatchModelAdapter, BatchPolicy
from dynaspec.core.round import DraftPlan, Proposal, Round, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.stats import GenerationStats
from dynaspec.core.timing import device_clock


@dataclass
class Row:
    """One row of the batch for the whole call: its tokens and everything that is its own."""

    tokens: torch.Tensor  # (T + max_new,) left padding, prompt, then new tokens
    pads: int  # left padding at the start
    sampler: TokenSampler
    emission: Emission | None
    limits: LimitsConfig  # the row's own: its max_new_tokens and EOS ids
    start: int = 0  # where its new tokens begin: T, the (padded) prompt's width
    length: int = 0  # tokens committed so far
    done: bool = False
    stats: GenerationStats = field(default_factory=GenerationStats)
    # transformers' streamer protocol (put(tokens (1, n)), end()), as generate(streamer=)
    # alone: the prompt (without left padding), each round's new tokens, end() at the end
    streamer: Any = None

    @property
    def committed(self) -> torch.Tensor:
        return self.tokens[: self.length]

    @property
    def room(self) -> int:
        """The most tokens the row may still emit."""
        return self.limits.max_new_tokens - (self.length - self.start)

    def begin(self, prompt: torch.Tensor) -> None:
        """Commits the (padded) prompt (T,): nothing new yet."""
        self.tokens[: prompt.numel()] = prompt
        self.start = self.length = prompt.numel()
        if self.streamer is not None:
            self.streamer.put(prompt[None, self.pads :].cpu())


@dataclass(frozen=True)
class _Drafts:
    """The drafting half of a batch round, per row (an ended row: an empty plan and
    proposal)."""

    plans: list[DraftPlan]
    proposals: list[Proposal]
    reasons: list[StopReason]


def decode_batch(
    target: BatchModelAdapter,
    drafter: BatchDrafter | None,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows: list[Row],
    policy: BatchPolicy,
) -> float:
    """Runs batch rounds until every row has ended; the rows keep their tokens and stats.
    Returns the wall time of the call."""
    started = perf_counter()
    target.begin(input_ids, attention_mask)
    if drafter is not None:
        drafter.begin(input_ids, attention_mask)
    for row, ids in zip(rows, input_ids, strict=True):
        row.begin(ids)
    round_start = perf_counter()
    while not all(row.done for row in rows):
        batch_round(target, drafter, policy, rows, round_start)
        round_start = perf_counter()
    return perf_counter() - started


def batch_round(
    target: BatchModelAdapter,
    drafter: BatchDrafter | None,
    policy: BatchPolicy,
    rows: Sequence[Row],
    round_start: float,
) -> list[Round | None]:
    """One round over the rows (an ended row takes no part): draft, verify in one target
    forward, commit each row's new tokens, let the policy learn, roll the caches back.
    round_start: perf_counter() when the round began (its time counts from there).
    Returns each row's record (None for a row that had ended)."""
    drafts = _draft(drafter, policy, rows)
    checked = _verify(target, rows, drafts)
    spent = perf_counter() - round_start
    records = [
        None if step is None else _commit(row, step, spent)
        for row, step in zip(rows, checked, strict=True)
    ]
    policy.update(records)
    target.crop([row.length - 1 for row in rows])
    if drafter is not None:
        drafter.crop([row.length - 1 for row in rows])
    return records


def _no_drafts(rows: Sequence[Row]) -> _Drafts:
    """A round in which no row drafts: empty plans and proposals."""
    empty = [Proposal(row.tokens.new_empty(0), None, ()) for row in rows]
    return _Drafts([DraftPlan()] * len(rows), empty, [StopReason.NONE] * len(rows))


def _draft(drafter: BatchDrafter | None, policy: BatchPolicy, rows: Sequence[Row]) -> _Drafts:
    """Offer, plan and propose for every row still going (as core/loop.py's `draft`)."""
    none = _no_drafts(rows)
    if drafter is None:
        return none
    reasons, empty = none.reasons, none.proposals
    rooms = [row.room for row in rows]
    options = [
        None if row.done else drafter.offer(index, row.committed, row.pads)
        for index, row in enumerate(rows)
    ]
    wanted = policy.plan(options, rooms)
    plans = [plan.within(room - 1) for plan, room in zip(wanted, rooms, strict=True)]
    for index, plan in enumerate(wanted):
        if plan.total:
            reasons[index] = StopReason.LENGTH if plan.total > rooms[index] - 1 else StopReason.MAX
    sequences = [row.committed if plans[i].total else None for i, row in enumerate(rows)]
    proposed = drafter.propose(
        sequences,
        options,
        plans,
        policy.stopper(plans),
        [row.sampler for row in rows],
        [row.limits.eos_token_ids for row in rows],
    )
    proposals = [made if made is not None else empty[i] for i, made in enumerate(proposed)]
    for index, made in enumerate(proposed):
        if made is not None and made.stop_reason != StopReason.MAX:
            reasons[index] = made.stop_reason
    return _Drafts(plans, proposals, reasons)


def first_token(target: BatchModelAdapter, rows: Sequence[Row], index: int) -> Round:
    """The first new token of row `index`, which has just joined with its prompt cached but
    for the last token: a plain round of that row alone (one forward over its last prompt
    token; the other rows feed nothing and keep their caches), so that a joining request's
    first token waits for no batch round. Returns the row's record."""
    round_start = perf_counter()
    step = _verify(target, rows, _no_drafts(rows), only=index)[index]
    assert step is not None, "the row had ended"
    return _commit(rows[index], step, perf_counter() - round_start)


def _verify(
    target: BatchModelAdapter, rows: Sequence[Row], drafts: _Drafts, only: int | None = None
) -> list[Checked | None]:
    """One target forward over every row still going (or row `only` alone): its unseen
    committed tokens and its drafted ones; then each row's acceptance, as alone."""
    empty = rows[0].tokens.new_empty(0)
    feeds, wanted = [], []
    for index, (row, cached, proposal) in enumerate(
        zip(rows, target.num_cached, drafts.proposals, strict=True)
    ):
        if row.done or only not in (None, index):
            feeds.append(empty)
            wanted.append(0)
            continue
        feeds.append(torch.cat([row.tokens[cached : row.length], proposal.tokens]))
        wanted.append(proposal.tokens.numel() + 1)
    device = getattr(target, "device", None)
    start = device_clock(device)
    logits = target.forward(feeds, wanted)
    seconds = device_clock(device) - start
    checked: list[Checked | None] = []
    for index, row in enumerate(rows):
        if not wanted[index]:
            checked.append(None)
            continue
        rows_logits = logits[index].to(row.tokens.device)  # (k + 1, V)
        require_finite(rows_logits, target)
        proposal = drafts.proposals[index]
        accepted, new_tokens, scores = accept(row.sampler, rows_logits, row.committed, proposal)
        checked.append(
            Checked(
                drafts.plans[index],
                proposal,
                drafts.reasons[index],
                accepted,
                feeds[index].numel(),
                seconds,
                new_tokens,
                scores,
                rows_logits,
            )
        )
    return checked


def _commit(row: Row, step: Checked, spent: float) -> Round:
    """Cuts a row's new tokens (EOS, length, criteria), appends them; the round's record."""
    eos = torch.tensor(row.limits.eos_token_ids, dtype=torch.long, device=row.tokens.device)
    new_tokens, done = cut(step.new_tokens, row.room, eos)
    if row.emission is not None:
        new_tokens, stopped = row.emission.emit(row.committed, new_tokens, step.scores, step.logits)
        done = done or stopped
    row.tokens[row.length : row.length + new_tokens.numel()] = new_tokens
    row.length += new_tokens.numel()
    row.done = done
    if row.streamer is not None:
        row.streamer.put(new_tokens[None].cpu())
        if done:
            row.streamer.end()
    other = spent - step.proposal.draft_time_s - step.target_time_s
    record = step.record(new_tokens.numel(), max(other, 0.0))
    row.stats.rounds.append(record)
    return record
