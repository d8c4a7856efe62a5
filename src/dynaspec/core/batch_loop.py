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
from time import perf_counter

import torch

from dynaspec.core.drafting import Drafts, draft_rows, no_drafts
from dynaspec.core.loop import Checked, check
from dynaspec.core.protocols import (
    BatchDrafter,
    BatchModelAdapter,
    BatchPolicy,
)
from dynaspec.core.round import Round
from dynaspec.core.row import Row
from dynaspec.core.timing import device_clock


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
    drafts = draft_rows(drafter, policy, rows)
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


def first_token(target: BatchModelAdapter, rows: Sequence[Row], index: int) -> Round:
    """The first new token of row `index`, which has just joined with its prompt cached but
    for the last token: a plain round of that row alone (one forward over its last prompt
    token; the other rows feed nothing and keep their caches), so that a joining request's
    first token waits for no batch round. Returns the row's record."""
    round_start = perf_counter()
    step = _verify(target, rows, no_drafts(rows), only=index)[index]
    assert step is not None, "the row had ended"
    record, new_tokens = _commit(rows[index], step, perf_counter() - round_start)
    rows[index].record(record, new_tokens)
    return record


def _verify(
    target: BatchModelAdapter, rows: Sequence[Row], drafts: Drafts, only: int | None = None
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
