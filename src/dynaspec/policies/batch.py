"""A policy per row, for a batch: each row plans, stops and learns as it would alone."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dynaspec.core.protocols import LookaheadPolicy, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Round, StopReason


class RowStoppers:
    """Each drafting row's own stopper (a `core.protocols.BatchStopper`)."""

    def __init__(self, stoppers: dict[int, Stopper]) -> None:
        self.stoppers = stoppers

    def stop(self, steps: dict[int, DraftStep]) -> dict[int, StopReason]:
        stopped = {}
        for row, step in steps.items():
            stopper = self.stoppers[row]
            if stopper.should_stop(step):
                stopped[row] = stopper.reason
        return stopped


class PerRow:
    """`core.protocols.BatchPolicy` from one `LookaheadPolicy` per row; `make` builds the
    policy of a row that joins (continuous batching)."""

    def __init__(
        self,
        policies: Sequence[LookaheadPolicy],
        make: Callable[[], LookaheadPolicy] | None = None,
    ) -> None:
        self.policies = list(policies)
        self.make = make
        self.name = self.policies[0].name if self.policies else make().name if make else ""

    def join(self, prefill_tokens: int = 0, prefill_s: float = 0.0) -> None:
        if self.make is None:
            raise TypeError("PerRow(make=None) cannot add rows: pass make=")
        self.policies.append(self.make())

    def leave(self, keep: Sequence[int]) -> None:
        self.policies = [self.policies[row] for row in keep]

    def plan(
        self, options: Sequence[DraftOptions | None], remaining: Sequence[int]
    ) -> list[DraftPlan]:
        return [
            DraftPlan() if offer is None else policy.plan(offer, room)
            for policy, offer, room in zip(self.policies, options, remaining, strict=True)
        ]

    def stopper(self, plans: Sequence[DraftPlan]) -> RowStoppers:
        return RowStoppers(
            {
                row: self.policies[row].stopper(plan)
                for row, plan in enumerate(plans)
                if plan.model > 0
            }
        )

    def update(self, rounds: Sequence[Round | None]) -> None:
        for policy, record in zip(self.policies, rounds, strict=True):
            if record is not None:
                policy.update(record)
