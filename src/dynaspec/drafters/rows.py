"""Any single-sequence draft source in a batch: one `Drafter` per row, each drafting alone.

`RowDrafters` satisfies `core.protocols.BatchDrafter` with one drafter per row, made by a
factory (a draft with another tokenizer, `cross_tokenizer.py`, and any other `Drafter`), so
that a draft source written once for `generate()` drafts in batches and in the server too.
Each row offers, proposes and rolls back exactly as it would alone, over its own committed
tokens without the left padding; its draft forwards are its own (drafters/batch.py shares
the draft model's forwards between rows where the draft shares the target's tokens). The
batch policy's stopper is asked about one row at a time (`RowStopper`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from dynaspec.core.protocols import BatchStopper, Drafter
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, StopReason
from dynaspec.core.sampling import TokenSampler


class RowStopper:
    """One row's `core.protocols.Stopper` over the batch's stopper for a round."""

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


class RowDrafters:
    """`core.protocols.BatchDrafter` over one `Drafter` per row, made by `make`."""

    def __init__(self, make: Callable[[], Drafter]) -> None:
        self.make = make
        self.rows: list[Drafter] = []
        self.pads: list[int] = []

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        self.rows, self.pads = [], []
        for ids, mask in zip(input_ids, attention_mask, strict=True):
            pads = int((mask == 0).sum())
            self.join(ids[pads:])
            self.pads[-1] = pads

    def join(self, prompt: torch.Tensor) -> None:
        """A row joins with `prompt` (n,): a drafter of its own, begun as alone."""
        drafter = self.make()
        drafter.begin(prompt[None])
        self.rows.append(drafter)
        self.pads.append(0)

    def leave(self, keep: Sequence[int]) -> None:
        self.rows = [self.rows[row] for row in keep]
        self.pads = [self.pads[row] for row in keep]

    def offer(self, row: int, tokens: torch.Tensor, pads: int) -> DraftOptions:
        return self.rows[row].offer(tokens[pads:])

    def propose(
        self,
        tokens: Sequence[torch.Tensor | None],
        options: Sequence[DraftOptions | None],
        plans: Sequence[DraftPlan],
        stopper: BatchStopper,
        samplers: Sequence[TokenSampler],
        eos_token_ids: Sequence[tuple[int, ...]],
    ) -> list[Proposal | None]:
        proposals: list[Proposal | None] = []
        for row, drafter in enumerate(self.rows):
            offer, sequence, plan = options[row], tokens[row], plans[row]
            if offer is None or sequence is None or not plan.total:
                proposals.append(None)
                continue
            proposals.append(
                drafter.propose(
                    sequence[self.pads[row] :],
                    offer,
                    plan,
                    RowStopper(stopper, row),
                    samplers[row].unpadded(),  # the row's tokens without their padding
                    eos_token_ids[row],
                )
            )
        return proposals

    def crop(self, num_committed: Sequence[int]) -> None:
        for drafter, pads, count in zip(self.rows, self.pads, num_committed, strict=True):
            drafter.crop(max(int(count) - pads, 0))
