"""The decoding loop over a batch of rows: every row drafts and is checked as it would be
alone, and the target checks all rows in one forward per round.

Rounds are ragged: each row offers, plans, drafts and accepts its own number of tokens, and
a row that ends (EOS, its length, a stopping criterion) stops being fed while the others go
on. The verification, the acceptance rule, the cuts and the records are
those of the single-sequence loop (core/loop.py); only the forwards are shared.

Each row plans with its own policy (`Row.policy`, the `LookaheadPolicy` of a sequence alone),
unless a batch rule (`BatchPolicy`: the adaptive rule, which prices the rows' drafts on the
forwards they share) coordinates the rows; then it plans, stops and learns for all of them.
Likewise each row drafts with its own drafter (`Row.drafter`, a `Drafter` as alone, over its
tokens without the left padding), unless a batch drafter (`BatchDrafter`: the draft model's
forwards shared between the rows) drafts for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter

import torch

from dynaspec.core.loop import Checked, check
from dynaspec.core.protocols import (
    BatchDrafter,
    BatchModelAdapter,
    BatchPolicy,
    BatchStopper,
    Stopper,
)
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, Round, StopReason
from dynaspec.core.row import Row
from dynaspec.core.timing import device_clock


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
    policy: BatchPolicy | None = None,
) -> float:
    """Runs batch rounds until every row has ended; the rows keep their tokens and stats.
    `drafter`, `policy`: the batch's, for all rows (None: each row's own).
    Returns the wall time of the call."""
    started = perf_counter()
    target.begin(input_ids, attention_mask)
    if drafter is not None:
        drafter.begin(input_ids, attention_mask)
    for row, ids in zip(rows, input_ids, strict=True):
        row.begin(ids)
        if row.drafter is not None:
            row.drafter.begin(ids[None, row.pads :])
    round_start = perf_counter()
    while not all(row.done for row in rows):
        batch_round(target, drafter, policy, rows, round_start)
        round_start = perf_counter()
    return perf_counter() - started


def batch_round(
    target: BatchModelAdapter,
    drafter: BatchDrafter | None,
    policy: BatchPolicy | None,
    rows: Sequence[Row],
    round_start: float,
) -> list[Round | None]:
    """One round over the rows (an ended row takes no part): draft, verify in one target
    forward, commit each row's new tokens, let the policies learn, roll the caches back
    (`drafter`, `policy`: the batch's, or None: each row's own).
    round_start: perf_counter() when the round began (its time counts from there).
    Returns each row's record (None for a row that had ended)."""
    drafts = _draft(drafter, policy, rows)
    checked = _verify(target, rows, drafts)
    spent = perf_counter() - round_start
    made = [
        None if step is None else _commit(row, step, spent)
        for row, step in zip(rows, checked, strict=True)
    ]
    records = [None if one is None else one[0] for one in made]
    if policy is not None:
        policy.update(records)
    else:
        for row, record in zip(rows, records, strict=True):
            if record is not None and row.policy is not None:
                row.policy.update(record)
    target.crop([row.length - 1 for row in rows])
    if drafter is not None:
        drafter.crop([row.length - 1 for row in rows])
    for row in rows:
        if row.drafter is not None:
            row.drafter.crop(max(row.length - 1 - row.pads, 0))
    for row, one in zip(rows, made, strict=True):
        if one is not None:  # after the rollback, as the single loop streams
            row.record(*one)
    return records


def _no_drafts(rows: Sequence[Row]) -> _Drafts:
    """A round in which no row drafts: empty plans and proposals."""
    empty = [Proposal(row.tokens.new_empty(0), None, ()) for row in rows]
    return _Drafts([DraftPlan()] * len(rows), empty, [StopReason.NONE] * len(rows))


def _draft(
    drafter: BatchDrafter | None, policy: BatchPolicy | None, rows: Sequence[Row]
) -> _Drafts:
    """Offer, plan and propose for every row still going (as core/loop.py's `draft`)."""
    none = _no_drafts(rows)
    if drafter is None and all(row.drafter is None for row in rows):
        return none
    reasons, empty = none.reasons, none.proposals
    rooms = [row.room for row in rows]
    options = [None if row.done else _offer(drafter, index, row) for index, row in enumerate(rows)]
    wanted = _plan(policy, rows, options, rooms)
    plans = [plan.within(room - 1) for plan, room in zip(wanted, rooms, strict=True)]
    for index, plan in enumerate(wanted):
        if plan.total:
            reasons[index] = StopReason.LENGTH if plan.total > rooms[index] - 1 else StopReason.MAX
    sequences = [row.committed if plans[i].total else None for i, row in enumerate(rows)]
    stopper = _stopper(policy, rows, plans)
    if drafter is not None:
        proposed = drafter.propose(
            sequences,
            options,
            plans,
            stopper,
            [row.sampler for row in rows],
            [row.limits.eos_token_ids for row in rows],
        )
    else:
        proposed = [
            _propose_alone(row, index, sequences[index], options[index], plans[index], stopper)
            for index, row in enumerate(rows)
        ]
    proposals = [made if made is not None else empty[i] for i, made in enumerate(proposed)]
    for index, made in enumerate(proposed):
        if made is not None and made.stop_reason != StopReason.MAX:
            reasons[index] = made.stop_reason
    return _Drafts(plans, proposals, reasons)


def _offer(drafter: BatchDrafter | None, index: int, row: Row) -> DraftOptions | None:
    """What row `index` could draft: the batch drafter's offer, or its own drafter's over
    its tokens without the left padding (None: it has no drafter)."""
    if drafter is not None:
        return drafter.offer(index, row.committed, row.pads)
    return None if row.drafter is None else row.drafter.offer(row.committed[row.pads :])


def _propose_alone(
    row: Row,
    index: int,
    sequence: torch.Tensor | None,
    offer: DraftOptions | None,
    plan: DraftPlan,
    stopper: BatchStopper,
) -> Proposal | None:
    """Row `index`'s proposal by its own drafter, as alone: its tokens without the left
    padding, its own stopper (None: the row drafts nothing this round)."""
    if row.drafter is None or offer is None or sequence is None or not plan.total:
        return None
    return row.drafter.propose(
        sequence[row.pads :],
        offer,
        plan,
        own_stopper(stopper, index),
        row.sampler.unpadded(),  # the row's tokens without their padding
        row.limits.eos_token_ids,
    )


def _plan(
    policy: BatchPolicy | None,
    rows: Sequence[Row],
    options: Sequence[DraftOptions | None],
    rooms: Sequence[int],
) -> list[DraftPlan]:
    """The rows' plans: the batch rule's, or each row's own policy's (none for an ended row
    or one without a policy)."""
    if policy is not None:
        return policy.plan(options, rooms)
    return [
        DraftPlan() if offer is None or row.policy is None else row.policy.plan(offer, room)
        for row, offer, room in zip(rows, options, rooms, strict=True)
    ]


def _stopper(
    policy: BatchPolicy | None, rows: Sequence[Row], plans: Sequence[DraftPlan]
) -> BatchStopper:
    """The round's stop rule: the batch rule's, or each drafting row's own stopper."""
    if policy is not None:
        return policy.stopper(plans)
    return RowStoppers(
        {
            index: row.policy.stopper(plan)
            for index, (row, plan) in enumerate(zip(rows, plans, strict=True))
            if plan.model > 0 and row.policy is not None
        }
    )


class RowStoppers:
    """Each drafting row's own `Stopper` as the round's `BatchStopper`."""

    def __init__(self, stoppers: dict[int, Stopper]) -> None:
        self.stoppers = stoppers  # by row index

    def stop(self, steps: dict[int, DraftStep]) -> dict[int, StopReason]:
        stopped = {}
        for row, step in steps.items():
            stopper = self.stoppers[row]
            if stopper.should_stop(step):
                stopped[row] = stopper.reason
        return stopped


def own_stopper(stopper: BatchStopper, row: int) -> Stopper:
    """Row `row`'s `Stopper` for the round: its own, or one over the batch's stopper."""
    own = getattr(stopper, "stoppers", {}).get(row)
    return own if own is not None else RowStopper(stopper, row)


class RowStopper:
    """One row's `Stopper` over the batch's stopper for a round (a batch rule's)."""

    needs_confidence = True  # the batch's stopper decides token by token

    def __init__(self, batch: BatchStopper, row: int) -> None:
        self.batch = batch
        self.row = row
        self.reason = StopReason.MAX

    def should_stop(self, step: DraftStep) -> bool:
        stopped = self.batch.stop({self.row: step})
        if self.row in stopped:
            self.reason = stopped[self.row]
            return True
        return False


def first_token(target: BatchModelAdapter, rows: Sequence[Row], index: int) -> Round:
    """The first new token of row `index`, which has just joined with its prompt cached but
    for the last token: a plain round of that row alone (one forward over its last prompt
    token; the other rows feed nothing and keep their caches), so that a joining request's
    first token waits for no batch round. Returns the row's record."""
    round_start = perf_counter()
    step = _verify(target, rows, _no_drafts(rows), only=index)[index]
    assert step is not None, "the row had ended"
    record, new_tokens = _commit(rows[index], step, perf_counter() - round_start)
    rows[index].record(record, new_tokens)
    return record


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
        checked.append(
            check(
                target,
                row.sampler,
                rows_logits,
                row.committed,
                drafts.plans[index],
                drafts.proposals[index],
                drafts.reasons[index],
                feeds[index].numel(),
                seconds,
            )
        )
    return checked


def _commit(row: Row, step: Checked, spent: float) -> tuple[Round, torch.Tensor]:
    """Commits a row's new tokens (core/row.py); the round's record and those tokens."""
    new_tokens = row.commit(step.new_tokens, step.scores, step.logits)
    other = spent - step.proposal.draft_time_s - step.target_time_s
    return step.record(new_tokens.numel(), max(other, 0.0)), new_tokens
