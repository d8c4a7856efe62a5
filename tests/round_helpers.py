"""Round records for policy tests, from the few numbers a test cares about."""

from __future__ import annotations

from collections.abc import Sequence

from dynaspec.core.round import DraftPlan, Round, StopReason


def make_round(
    num_drafted: int,
    num_accepted: int,
    confidences: Sequence[float] = (),
    draft_time_s: float = 0.0,
    target_time_s: float = 0.0,
    num_verified: int | None = None,
    draft_forwards: int = 0,
    catchup: int = 0,
    num_copied: int = 0,
    agreement: int = 0,
    plan: DraftPlan | None = None,
) -> Round:
    """A finished round (`num_verified` defaults to num_drafted + 1; `plan` to what was
    drafted, copied tokens first)."""
    return Round(
        plan=plan or DraftPlan(num_copied, num_drafted - num_copied),
        stop_reason=StopReason.MAX,
        num_drafted=num_drafted,
        num_copied=num_copied,
        num_accepted=num_accepted,
        num_emitted=num_accepted + 1,
        num_verified=num_drafted + 1 if num_verified is None else num_verified,
        agreement=agreement,
        catchup=catchup,
        draft_forwards=draft_forwards,
        confidences=tuple(confidences),
        draft_time_s=draft_time_s,
        target_time_s=target_time_s,
    )
