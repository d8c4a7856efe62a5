"""A vLLM step in dynaspec's words: one `Round` per request whose proposal the step judged
(what its tokens teach: acceptance, calibration), and one `Round` for the step's forward
(what the forward costs, and the batch's rate).

The batch-cost model. A step verifies every request's tokens in one forward of N tokens
(each decoding request's newest token and its drafts), which takes T(N) = a + b N seconds on
this engine. One more drafted token makes that step, and so every request in it, b seconds
later (plus what proposing it took, c), while it is expected to add P * a tokens (P: the
chance that all the request's drafts before it are accepted; a: its own acceptance). With R
the engine's measured rate in tokens per second over all requests, the token pays when

    P * a  >  R * (b + c),

which is dynaspec's rule `P_k * a_(k+1) > rho * (c + V(k + 2) - V(k + 1))` with both sides
in seconds: rho = R * T(1) and V's slope = b / T(1), so T(1) cancels. So the estimates are
those of one `AdaptivePolicy` (costs.py fits the line through the medians of T per N, the
rate is a running mean), fed with the step as a round of N verified tokens. As the batch
grows, R grows and, once the forward is compute-bound, so does b: each request drafts less,
which is what vLLM's table of K by batch size does by hand.

Steps that prefill (a new request, a preempted one coming back, a prompt chunk) are not
timed: their N is not known to the proposer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dynaspec.core.round import DraftPlan, Round, StopReason
from dynaspec.integrations.vllm.requests import Outcome, Row


@dataclass(frozen=True)
class StepCost:
    """What the proposer did at the previous step: its time and the draft's forwards."""

    draft_time_s: float = 0.0  # wall time of the previous propose() call
    draft_forwards: int = 0  # draft model forwards in it (0: copies only)
    catchup: int = 0  # the most tokens fed to one request's draft in its first forward


def request_round(outcome: Outcome) -> Round:
    """The round of one request at one step, as its own generate() would have recorded it
    (times are the step's, in `step_round`)."""
    sent = outcome.sent
    drafted = len(sent.tokens)
    return Round(
        plan=sent.plan,
        stop_reason=StopReason.MAX if drafted else StopReason.NONE,
        num_drafted=drafted,
        num_copied=sent.num_copied,
        num_accepted=outcome.num_accepted,
        num_emitted=outcome.num_emitted,
        num_verified=drafted + 1,
        agreement=sent.agreement,
        catchup=0,
        draft_forwards=0,
        confidences=sent.confidences,
        draft_time_s=0.0,
        target_time_s=0.0,
    )


def step_round(rows: Sequence[Row | None], step_s: float, cost: StepCost) -> Round | None:
    """The step's forward as one round of N verified tokens, or None when the step cannot be
    timed: a row was prefilled in it, or a row's proposal was not judged."""
    outcomes = [row.outcome if row is not None else None for row in rows]
    if not outcomes or step_s <= 0 or any(o is None for o in outcomes):
        return None
    judged: list[Outcome] = [o for o in outcomes if o is not None]
    drafted = sum(len(o.sent.tokens) for o in judged)
    copied = sum(o.sent.num_copied for o in judged)
    verified = drafted + len(judged)
    model = drafted - copied
    return Round(
        plan=DraftPlan(model=model, probe=any(o.sent.plan.probe for o in judged)),
        stop_reason=StopReason.MAX,
        num_drafted=verified - 1,  # N - 1: the forward is timed as a step over N tokens
        num_copied=max(verified - 1 - model, 0),
        num_accepted=sum(o.num_accepted for o in judged),
        num_emitted=sum(o.num_emitted for o in judged),
        num_verified=verified,
        agreement=0,
        catchup=cost.catchup,
        draft_forwards=cost.draft_forwards,
        confidences=(),
        draft_time_s=cost.draft_time_s,
        target_time_s=step_s,
    )
