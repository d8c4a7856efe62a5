"""The drafting half of a round, for rows: offer, plan, propose. The single loop
(core/loop.py) runs it over its one row, the batch loop (core/batch_loop.py) over the rows of
a batch, so both call each row's policy and drafter (`Row.policy`, `Row.drafter`: the one
protocol of each role) in the same order, with the same cuts and stop reasons; a batch rule
(`BatchPolicy`) or a batch drafter (`BatchDrafter`) takes over for all rows where the rows
share their forwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dynaspec.core.protocols import BatchDrafter, BatchPolicy, BatchStopper, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, StopReason
from dynaspec.core.row import Row


@dataclass(frozen=True)
class Drafts:
    """The drafting half of a batch round, per row (an ended row: an empty plan and
    proposal)."""

    plans: list[DraftPlan]
    proposals: list[Proposal]
    reasons: list[StopReason]


def no_drafts(rows: Sequence[Row]) -> Drafts:
    """A round in which no row drafts: empty plans and proposals."""
    empty = [Proposal(row.tokens.new_empty(0), None, ()) for row in rows]
    return Drafts([DraftPlan()] * len(rows), empty, [StopReason.NONE] * len(rows))


def draft_rows(
    drafter: BatchDrafter | None, policy: BatchPolicy | None, rows: Sequence[Row]
) -> Drafts:
    """Offer, plan and propose for every row still going: each at most the tokens it may
    still emit but one, nothing after a drafted EOS; `drafter`, `policy`: the batch's for
    all rows (None: each row's own)."""
    if drafter is None and policy is None:  # each row as alone
        made = [draft_alone(row) for row in rows]
        return Drafts([one[0] for one in made], [one[1] for one in made], [one[2] for one in made])
    none = no_drafts(rows)
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
    return Drafts(plans, proposals, reasons)


def draft_alone(row: Row) -> tuple[DraftPlan, Proposal, StopReason]:
    """Offer, plan, propose for one row with its own drafter and policy, as the single loop
    drafts: at most the tokens it may still emit but one (its committed tokens without the
    left padding; an ended row, or one without a drafter, drafts nothing)."""
    tokens = row.committed if not row.pads else row.committed[row.pads :]
    empty = Proposal(tokens.new_empty(0), None, ())
    drafter, policy = row.drafter, row.policy
    if drafter is None or policy is None or row.done:
        return DraftPlan(), empty, StopReason.NONE
    room = row.room
    options = drafter.offer(tokens)
    wanted = policy.plan(options, room)  # of at most the tokens still to emit
    plan = wanted.within(room - 1)
    if not wanted.total:
        return plan, empty, StopReason.NONE
    # The room left cut the plan (to nothing on the last token): LENGTH.
    reason = StopReason.LENGTH if wanted.total > room - 1 else StopReason.MAX
    if not plan.total:
        return plan, empty, reason
    sampler = row.sampler.unpadded()  # the row's tokens without their padding
    stopper = policy.stopper(plan)
    proposal = drafter.propose(tokens, options, plan, stopper, sampler, row.limits.eos_token_ids)
    if proposal.stop_reason != StopReason.MAX:
        reason = proposal.stop_reason
    return plan, proposal, reason


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
            if plan.total and row.policy is not None
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
