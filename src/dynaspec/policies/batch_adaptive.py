"""The adaptive rule for a batch: one set of estimates for all rows, one decision for the
batch's forwards (docs/design/adaptive.md, "Batches").

A batch round costs what its batched forwards cost, whichever rows use them: c per draft
forward (one per drafted position, for every drafting row at once) and V_B(W) for the
target's forward over a block W tokens wide. So the rows draft together and stop together:
the draft goes on while the rows' summed expected gain beats the batch's rate rho_B (tokens
of all rows per batch step) times the marginal cost,

    sum over drafting rows of P_(r,k) * a_(r,k+1)  >  rho_B * (c + V_B(k + 2) - V_B(k + 1)),

and a round drafts at all when the rows' summed expected gain beats the cost over some
lookahead (`AdaptivePolicy.model_value` with the rows). With one row this is
`AdaptivePolicy`'s rule. The estimates (calibration, costs measured on batch forwards,
rho_B, copied tokens' acceptance, probers) are one `AdaptivePolicy`'s; each row's copies
are planned as alone, with those estimates.

Where the target adapter packs the rows (`packs_rows`: a forward costs what its N tokens
cost, not B x the widest row's), V_B is a function of the tokens all rows draft, D: V_B(1 + D),
with V_B(1) the forward that feeds every row one token. Then a row's next token costs
V_B(D + 2) - V_B(D + 1) whichever row drafts it, so each row stops on its own when its
expected gain no longer beats rho_B times that, and all stop when the rows going on do not
repay the shared draft forward, rho_B * c.

Batch sizes. A batched forward's time depends on the rows in it (a draft forward over 8
rows cost half a target step where one over 2 costs a sixth, measured on an AVX512 CPU), and
rows end at different rounds, so each number of rows going keeps its own cost model; the
first time the batch has a size, that model starts from the priors and the per-token times
of prefills and catch-ups measured so far, and rho_B is scaled with the rows. The calibration
and the copied tokens' acceptance are the rows' and stay shared. A row that lags its draft
(it did not draft for some rounds) makes the draft read its catch-up; lagging rows start
together, as many of them as the tokens left repay their catch-ups summed (the rows worth the
most first), and not before the batch's step has been timed SETTLE_STEPS times (one cold step
would halve the price of all of them).

Rows that end first. A batch no row joins lasts as long as its longest row, and a forward
over fewer rows costs about the same, so a row that gets ahead shortens nothing: each row's
token is worth w_r = (its steps to its end, its tokens left at its own pace pi_r (tokens per
batch step), over the most any row needs)^WORTH_POWER (`worths`; 1 for every row where rows
join), carried in its plan (`DraftPlan.worth`). Gains are weighed by w_r and costs at
rho_w = max(sum of w_r pi_r, W), W the rows' summed worth (`weighted_rate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Round, StopReason
from dynaspec.policies.adaptive import AdaptiveConfig, AdaptivePolicy
from dynaspec.policies.source_plan import plan_with_copy

MEASURED_FIRST = 4  # first drafted tokens judged before more than one row of a batch
#                     drafts: the draft's acceptance is measured on one row before every
#                     lagging row's catch-up is paid on the prior (measured at batch 8: 5
#                     rows' prompts read at once, 2.4 s, on a1 = 0.8, for 4 rounds saved)
SETTLE_STEPS = 3  # plain batch steps timed before lagging rows of a batch may start:
#                   the first one after a prefill can run at twice the usual time (measured:
#                   0.40 s against 0.19 s over 8 rows, after another model had run), and a
#                   step that slow halves every catch-up's price in steps

WORTH_POWER = 8  # a fixed batch's row with 10% fewer tokens left than the most is worth 0.43
#                  of a token, with 25% fewer 0.10: only the rows that may end last count
#                  (linear worths still let rows far ahead set the rate the last one's draft
#                  must beat: measured, the last row's draft never started)


class BatchAdaptivePolicy:
    """`core.protocols.BatchPolicy`: the cost-aware rule over a batch's shared forwards."""

    name = "adaptive"

    def __init__(
        self,
        rows: int,
        max_tokens: int = 20,
        config: AdaptiveConfig | None = None,
        packed: bool = False,
        fixed: bool = False,
    ) -> None:
        self.shared = AdaptivePolicy(max_tokens, config)  # the batch's estimates
        self.rows = max(rows, 1)  # the rows going: the batch size the estimates stand for
        self.shared.rate = float(self.rows)  # rho_B before any measurement: the target alone
        self.packed = packed  # the target adapter's packs_rows (module docstring)
        self.costs = {self.rows: self.shared.costs}  # each batch size's own cost model
        # A fixed batch's (no row joins: the call lasts as long as its longest row) rows' own
        # paces, tokens per batch step as rho_B but per row; None where rows join
        self.paces = [1.0] * self.rows if fixed else None

    def resize(self, going: int) -> None:
        """The estimates for a batch of `going` rows (module docstring, "Batch sizes"): that
        size's own cost model (a new one, with the per-token times measured so far, for a
        size not seen yet), and rho_B scaled with the rows."""
        if going < 1 or going == self.rows:
            return
        shared = self.shared
        shared.rate *= going / self.rows
        if going not in self.costs:
            self.costs[going] = shared.new_costs()
            self.costs[going].take_token_costs(shared.costs)
        shared.costs = self.costs[going]
        self.rows = going

    def plan(
        self, options: Sequence[DraftOptions | None], remaining: Sequence[int]
    ) -> list[DraftPlan]:
        shared = self.shared
        going = sum(offer is not None for offer in options)  # rows the target alone serves
        self.resize(going)
        worths = self.worths(options, remaining)
        rate = weighted_rate(shared.rate, worths, self.paces)
        ready = self.ready(options, remaining, worths)
        model = DraftPlan()
        width = len(ready) if self.packed else 1  # tokens a drafted position adds
        worth = sum(worths[row] for row in ready)
        if ready and shared.model_value(rows=worth, floor=0.0, width=width, rate=rate) > 0.0:
            model = DraftPlan(model=shared.config.max_tokens)
        elif shared.prober.due():
            model, ready = self.probe(options, remaining, ready, worths, rate)
        plans = []
        for row, offer in enumerate(options):
            alone = replace(model if row in ready else DraftPlan(), worth=worths[row])
            if offer is not None and offer.offers_copy:  # a copied token gains `worth`
                floor = rate / max(worths[row], 1e-12)
                made = plan_with_copy(shared, offer, remaining[row], alone, floor)
                alone = replace(made, worth=worths[row])
            plans.append(alone)
        return plans

    def probe(
        self,
        options: Sequence[DraftOptions | None],
        remaining: Sequence[int],
        ready: list[int],
        worths: Sequence[float],
        rate: float,
    ) -> tuple[DraftPlan, list[int]]:
        """A due probe of one token (it keeps the estimates fresh) and the rows that draft it:
        the ready rows, else the lagging row with the shortest catch-up where drafting is not
        expected to pay (where it is, starting it is `ready`'s choice), when its catch-up is
        cheap (`AdaptivePolicy.cheap_probe`); else no draft."""
        shared = self.shared
        rows = ready or _drafting(options)
        if not rows:
            return DraftPlan(), ready
        cheapest = min(rows, key=lambda row: options[row].catchup)  # type: ignore[union-attr]
        if not ready and shared.model_value(rows=worths[cheapest], floor=0.0, rate=rate) > 0.0:
            return DraftPlan(), ready
        if shared.cheap_probe(options[cheapest].catchup, remaining[cheapest]):  # type: ignore[union-attr,arg-type]
            return DraftPlan(model=1, probe=True), ready or [cheapest]
        return DraftPlan(), ready

    def worths(
        self, options: Sequence[DraftOptions | None], remaining: Sequence[int]
    ) -> list[float]:
        """What one token of each row is worth to the batch (module docstring, "Rows that
        end first"): 0 for an ended row; 1 in a batch rows join; in a fixed batch, the
        row's steps to its end (its tokens left at its own pace) over the most any row
        needs, to the power WORTH_POWER."""
        if self.paces is None:
            return [0.0 if offer is None else 1.0 for offer in options]
        ends = [
            None if offer is None else max(room, 1) / max(pace, 1e-6)
            for offer, room, pace in zip(options, remaining, self.paces, strict=True)
        ]
        last = max((end for end in ends if end is not None), default=1.0)
        return [0.0 if end is None else min(end / last, 1.0) ** WORTH_POWER for end in ends]

    def ready(
        self,
        options: Sequence[DraftOptions | None],
        remaining: Sequence[int],
        worths: Sequence[float],
    ) -> list[int]:
        """The rows whose draft may run this round: those in step with it, and as many of the
        lagging ones as is worth starting (module docstring): taken in the order of their
        worth times their tokens left (then the shortest catch-up first), the most of them
        whose catch-ups summed (the draft reads each row's) are repaid by the tokens left of
        the least of them, at its worth (`AdaptivePolicy.worth_starting`, the target
        verifying the drafts of every row that would draft where it packs them): a row far
        ahead does not ride along on the last row's savings. Priced on SETTLE_STEPS timed
        steps at least where the batch has more than one row, and one row at a time until
        MEASURED_FIRST first drafted tokens have been judged."""
        rows = _drafting(options)
        in_step = [row for row in rows if options[row].catchup <= 2]  # type: ignore[union-attr]
        lagging = sorted(
            (row for row in rows if row not in in_step),
            key=lambda row: (-worths[row] * remaining[row], options[row].catchup),  # type: ignore[union-attr]
        )
        if not lagging:
            return rows
        if len(rows) > 1 and self.shared.costs.steps_timed < SETTLE_STEPS:
            return in_step  # the step not settled yet
        if len(rows) > 1 and self.shared.calibration.first_total < MEASURED_FIRST:
            lagging = lagging[: max(0, 1 - len(in_step))]  # one row measures the draft first
        for count in range(len(lagging), 0, -1):
            start = lagging[:count]
            catchup = 1 + sum(options[row].catchup - 1 for row in start)  # type: ignore[union-attr]
            width = len(in_step) + count if self.packed else 1
            left = worths[start[-1]] * remaining[start[-1]]  # the least of them
            if self.shared.worth_starting(catchup, left, width):
                return sorted(in_step + start)
        return in_step

    def join(self, prefill_tokens: int = 0, prefill_s: float = 0.0) -> None:
        """The estimates are the batch's: a row that joins uses them as they stand. Its
        prompt's prefill is the target's time per prompt token, which prices the draft's
        catch-up of that prompt (`CostModel.catchup_cost`): every batch size's model."""
        for costs in self.costs.values():  # the shared estimates' among them
            costs.learn_prefill(prefill_tokens, prefill_s)

    def stopper(self, plans: Sequence[DraftPlan]) -> JointStopper | PackedStopper:
        drafting = {row: plan for row, plan in enumerate(plans) if plan.model > 0}
        rate = weighted_rate(self.shared.rate, [plan.worth for plan in plans], self.paces)
        if self.packed:
            copied = sum(plan.copy for plan in plans if plan.model == 0)
            return PackedStopper(self.shared, drafting, rate, copied)
        return JointStopper(self.shared, drafting, rate)

    def update(self, rounds: Sequence[Round | None]) -> None:
        done = [record for record in rounds if record is not None]
        if not done:
            return
        for record in done:
            self.shared.learn_tokens(record)
        tokens = sum(record.num_accepted + 1 for record in done)
        combined = packed_round(done) if self.packed else batch_round(done)
        self.shared.learn_forwards(combined, tokens)
        steps = self.shared.round_steps(combined)
        if self.paces is not None and steps is not None:
            decay = self.shared.config.rate_decay
            for row, record in enumerate(rounds):
                if record is not None:
                    pace = (record.num_accepted + 1) / steps
                    self.paces[row] = decay * self.paces[row] + (1 - decay) * pace


class JointStopper:
    """Stops every drafting row at once when their summed gain no longer pays (a
    `core.protocols.BatchStopper`)."""

    def __init__(self, shared: AdaptivePolicy, plans: dict[int, DraftPlan], rate: float) -> None:
        self.shared = shared
        self.plans = plans  # the drafting rows' plans
        self.rate = rate  # the rate costs are weighed at (`weighted_rate`)
        # P_(r,k) of each drafting row: from the copied tokens' Q_m (1 without a copy)
        self.prefixes = {
            row: plan.copy_accepted if plan.copy else 1.0 for row, plan in plans.items()
        }

    def stop(self, steps: dict[int, DraftStep]) -> dict[int, StopReason]:
        if not steps:
            return {}
        gain, widest = 0.0, 0
        for row, step in steps.items():
            accept = self.shared.calibration.acceptance(step.confidence)
            self.prefixes[row] *= accept
            plan = self.plans[row]
            if step.index + 1 - plan.copy < plan.model:  # the row may draft one more
                gain += plan.worth * self.prefixes[row] * accept
            widest = max(widest, step.index + 1)
        if gain <= self.shared.threshold(widest, floor=0.0, rate=self.rate):
            return dict.fromkeys(steps, StopReason.COST)
        return {}


class PackedStopper(JointStopper):
    """The rows' stopper where the target packs them: each row stops when its next token's
    expected gain no longer beats rho_B times what one more verified token costs; all stop
    when the rows going on no longer repay the shared draft forward (module docstring)."""

    def __init__(
        self,
        shared: AdaptivePolicy,
        plans: dict[int, DraftPlan],
        rate: float,
        copied: int,
    ) -> None:
        super().__init__(shared, plans, rate)
        self.copied = copied  # tokens copied by the rows that do not draft with the model

    def stop(self, steps: dict[int, DraftStep]) -> dict[int, StopReason]:
        if not steps:
            return {}
        shared = self.shared
        drafted = self.copied + sum(step.index + 1 for step in steps.values())  # D
        verify = shared.verify_step(drafted + 1)  # V_B(D + 2) - V_B(D + 1)
        rho = self.rate
        stopped, gain = {}, 0.0
        for row, step in steps.items():
            accept = shared.calibration.acceptance(step.confidence)
            self.prefixes[row] *= accept
            plan = self.plans[row]
            if step.index + 1 - plan.copy >= plan.model:  # the row's plan is drafted
                continue
            more = plan.worth * self.prefixes[row] * accept - rho * verify
            if more <= 0.0:
                stopped[row] = StopReason.COST
            else:
                gain += more
        if gain <= rho * shared.costs.draft_cost():
            return dict.fromkeys(steps, StopReason.COST)
        return stopped


def weighted_rate(rate: float, worths: Sequence[float], paces: Sequence[float] | None) -> float:
    """rho_w, the rate a batch weighs costs at: the rows' paces (tokens per batch step) each
    at its worth, never below what the target alone yields, one token per row going at its
    worth; without paces (a batch rows join, every worth 1), max(rho_B, rows going)."""
    total = sum(worths)
    if paces is None:
        return max(rate, total)
    return max(sum(worth * pace for worth, pace in zip(worths, paces, strict=True)), total)


def packed_round(rounds: Sequence[Round]) -> Round:
    """The batch's forwards as one round where the target packs the rows: every row's
    drafted and verified tokens counted, so that V is learnt over 1 + the tokens all rows
    drafted (V(1): every row fed one token), the draft's forwards as many as the row that
    took part in all of them, the shared times."""
    longest = max(rounds, key=lambda r: r.draft_forwards)
    return Round(
        plan=DraftPlan(model=longest.plan.model, probe=any(r.plan.probe for r in rounds)),
        stop_reason=StopReason.MAX,
        num_drafted=sum(r.num_drafted for r in rounds),
        num_copied=sum(r.num_copied for r in rounds),
        num_accepted=sum(r.num_accepted for r in rounds),
        num_emitted=sum(r.num_emitted for r in rounds),
        num_verified=sum(r.num_verified for r in rounds) - len(rounds) + 1,
        agreement=0,
        catchup=max(r.catchup for r in rounds),
        draft_forwards=longest.draft_forwards,
        confidences=(),
        draft_time_s=longest.draft_time_s,
        target_time_s=rounds[0].target_time_s,
    )


def batch_round(rounds: Sequence[Round]) -> Round:
    """The batch's forwards as one round, for the cost model: the target's block as wide as
    the widest row's tokens, the draft's forwards as many as the row that took part in
    all of them, the shared times."""
    widest = max(rounds, key=lambda r: r.num_verified)
    longest = max(rounds, key=lambda r: r.draft_forwards)
    most_model = max(r.num_model for r in rounds)  # the prober asks: did the model draft?
    probe = any(r.plan.probe for r in rounds)
    return Round(
        plan=DraftPlan(model=longest.plan.model, probe=probe),
        stop_reason=StopReason.MAX,
        num_drafted=widest.num_drafted,
        num_copied=max(widest.num_drafted - most_model, 0),
        num_accepted=widest.num_accepted,
        num_emitted=widest.num_emitted,
        num_verified=widest.num_verified,
        agreement=0,
        catchup=max(r.catchup for r in rounds),
        draft_forwards=longest.draft_forwards,
        confidences=(),
        draft_time_s=longest.draft_time_s,
        target_time_s=widest.target_time_s,
    )


def _drafting(options: Sequence[DraftOptions | None]) -> list[int]:
    """The rows still going whose draft model may draft (those with a catch-up to offer)."""
    return [
        row for row, offer in enumerate(options) if offer is not None and offer.catchup is not None
    ]
