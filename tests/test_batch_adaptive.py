"""The adaptive rule for batches (policies/batch_adaptive.py): with one row it is the
single-sequence rule, decision for decision; with several, the rows' gains are summed
against the batch's cost and the rows stop together."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path

import pytest
import torch
from decision_scenarios import SCENARIOS, Outcome, Planned, trace
from round_helpers import make_round

from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep
from dynaspec.policies.adaptive import AdaptiveConfig
from dynaspec.policies.batch_adaptive import (
    MEASURED_FIRST,
    BatchAdaptivePolicy,
    batch_round,
    packed_round,
    weighted_rate,
)
from dynaspec.policies.lookup_acceptance import LookupPrior

TRACES = json.loads((Path(__file__).parent / "data" / "decision_traces.json").read_text())


def one_row_driver(schedule: str, packed: bool = False):
    """The scenario's calls through a batch policy of one row."""
    policy = BatchAdaptivePolicy(rows=1, max_tokens=20, packed=packed)
    plans: dict[int, DraftPlan] = {}

    def plan(catchup, copy_tokens, agreement, remaining, started):
        copy = torch.zeros(copy_tokens, dtype=torch.long) if copy_tokens else None
        offer = DraftOptions(catchup, copy, agreement if copy_tokens else 0, started=started)
        made = policy.plan([offer], [remaining])[0]
        planned = Planned(made.copy, made.model)
        plans[id(planned)] = made
        return planned

    def start(planned):
        stopper = policy.stopper([plans[id(planned)]])
        return lambda i, pos, tok, conf: bool(stopper.stop({0: DraftStep(i, pos, tok, conf)}))

    def update(planned, o: Outcome):
        made = plans.pop(id(planned))
        record = make_round(
            o.drafted, o.accepted, o.confidences, o.draft_time_s, o.target_time_s, o.verified,
            o.draft_forwards, o.catchup, o.copied, o.agreement, plan=made,
        )  # fmt: skip
        policy.update([record])

    return plan, start, update


ADAPTIVE = [s for s in SCENARIOS if s[0] == "adaptive"]


@pytest.mark.parametrize("packed", (False, True), ids=("padded", "packed"))
@pytest.mark.parametrize("scenario", ADAPTIVE, ids=lambda s: "/".join(map(str, s)))
def test_one_row_decides_as_the_single_sequence_rule(scenario, packed: bool) -> None:
    def driver(schedule: str):
        return one_row_driver(schedule, packed)

    assert trace(driver, *scenario) == TRACES["/".join(map(str, scenario))]


def step(index: int, confidence: float) -> DraftStep:
    return DraftStep(index, 10 + index, 1, confidence)


def test_the_rows_gains_are_summed_and_the_rows_stop_together() -> None:
    # Fresh priors: c = 0.25, V(n) = 1 + 0.05 (n - 1), calibration = identity, and rho_B
    # never below the 2 rows the target alone serves: threshold(1) = 2 x 0.30 = 0.60.
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20)
    plans = [DraftPlan(model=20), DraftPlan(model=20)]
    # Row 0 at 0.95 (gain 0.9025), row 1 at 0.45 (gain 0.2025, which alone would stop
    # at its own threshold 0.30): together 1.105 > 0.60, both go on.
    assert policy.stopper(plans).stop({0: step(0, 0.95), 1: step(0, 0.45)}) == {}
    # Both at 0.45: 0.405 <= 0.60, both stop, for the cost.
    stopped = policy.stopper(plans).stop({0: step(0, 0.45), 1: step(0, 0.45)})
    assert stopped == {0: "cost", 1: "cost"}


def test_the_batch_drafts_when_the_rows_first_tokens_pay_together() -> None:
    policy = BatchAdaptivePolicy(rows=3, max_tokens=20)
    offers = [DraftOptions(1), DraftOptions(1), None]  # the third row has ended
    plans = policy.plan(offers, [50, 50, 0])
    # 2 x a_1 (0.8) = 1.6 > rho_B (2 rows going) x 0.30
    assert [p.model for p in plans] == [20, 20, 0]
    policy.shared.calibration.first_accepted, policy.shared.calibration.first_total = 0.0, 40.0
    # a_1 = 1.6 / 42: 2 x 0.038 < 0.60: a plain batched target step
    assert [p.model for p in policy.plan(offers, [50, 50, 0])] == [0, 0, 0]


def three_rows() -> list:
    """A batch round's records: a row that drafted 3 with the model, one that drafted 1,
    one that copied 2 (no draft forwards)."""
    return [
        make_round(3, 1, (0.9,) * 3, 0.3, 0.5, 4, 3, 1),
        make_round(1, 1, (0.9,), 0.1, 0.5, 2, 1, 1),
        make_round(2, 2, (1.0, 1.0), 0.0, 0.5, 3, 0, 0, num_copied=2),
    ]


def test_the_batch_round_is_as_wide_as_its_widest_row() -> None:
    merged = batch_round(three_rows())
    assert (merged.num_verified, merged.num_drafted, merged.draft_forwards) == (4, 3, 3)
    assert (merged.draft_time_s, merged.target_time_s, merged.num_model) == (0.3, 0.5, 3)


def test_a_rows_copy_is_weighed_at_the_batchs_rate_never_below_its_rows() -> None:
    # Fresh priors: b = 0.8 per copied token, V(n) = 1 + 0.05 (n - 1). The batch's rate has
    # fallen to 1 token per batch step (speculation losing); its 2 rows yield 2 with the
    # target alone, so copied token j pays while 0.8^j > 2 x 0.05: j <= 10 of the 12 on
    # offer (at rho = 1, as alone, all 12).
    flat = AdaptiveConfig(max_tokens=20, lookup=LookupPrior(acceptance=(0.8,) * 7))
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20, config=flat)
    policy.shared.rate = 1.0
    match = DraftOptions(None, torch.zeros(12, dtype=torch.long), 2)
    plans = policy.plan([match, match], [50, 50])
    assert [plan.copy for plan in plans] == [10, 10]


def test_packed_rows_stop_one_by_one_and_together_for_the_draft() -> None:
    # Fresh priors: c = 0.25, V(1 + D) = 1 + 0.05 D, calibration = identity, rho_B = 2 (the
    # 2 rows going). Packed, a row's next token costs rho_B x 0.05 = 0.10 to verify, and
    # the rows going on must repay the shared draft forward, rho_B x 0.25 = 0.50.
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20, packed=True)
    plans = [DraftPlan(model=20), DraftPlan(model=20)]
    # Row 0 at 0.95 (0.9025 - 0.10), row 1 at 0.25 (0.0625 - 0.10 <= 0): row 1 stops alone.
    assert policy.stopper(plans).stop({0: step(0, 0.95), 1: step(0, 0.25)}) == {1: "cost"}
    # Both at 0.55 (2 x (0.3025 - 0.10) = 0.405 <= 0.50): both stop, for the draft's cost.
    stopped = policy.stopper(plans).stop({0: step(0, 0.55), 1: step(0, 0.55)})
    assert stopped == {0: "cost", 1: "cost"}
    # Padded, the same two rows at 0.95 and 0.25 go on together (their summed gain beats
    # rho_B x (c + 0.05) = 0.60) and row 1's unpaying token widens the block.
    padded = BatchAdaptivePolicy(rows=2, max_tokens=20)
    assert padded.stopper(plans).stop({0: step(0, 0.95), 1: step(0, 0.25)}) == {}


def test_the_packed_round_counts_every_rows_tokens() -> None:
    merged = packed_round(three_rows())
    # V is learnt at 1 + the 6 tokens drafted by all rows; the draft's forwards are the
    # longest row's
    assert (merged.num_verified, merged.num_drafted, merged.draft_forwards) == (7, 6, 3)
    assert (merged.draft_time_s, merged.target_time_s, merged.num_model) == (0.3, 0.5, 4)


def test_packed_the_batch_drafts_when_every_drafted_position_pays_for_its_rows() -> None:
    # Packed, each drafted position adds a token per drafting row: with 2 rows at a_1 = 0.8,
    # position 1 gains 1.6 against rho_B (2) x (0.25 + 2 x 0.05) = 0.70.
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20, packed=True)
    offers = [DraftOptions(1), DraftOptions(1)]
    assert [p.model for p in policy.plan(offers, [50, 50])] == [20, 20]
    policy.shared.calibration.first_accepted, policy.shared.calibration.first_total = 0.0, 40.0
    assert [p.model for p in policy.plan(offers, [50, 50])] == [0, 0]


def test_each_batch_size_keeps_its_own_costs_and_rho_scales_with_the_rows() -> None:
    # Measured at 4 rows: a draft forward of 0.1 s against a 0.2 s step (c = 0.5), a
    # prefill at 2 ms per token, rho_B = 6 tokens per batch step.
    policy = BatchAdaptivePolicy(rows=4, max_tokens=20, packed=True)
    four = policy.shared.costs
    four.draft_costs.append(0.1)
    four.verify_times[1] = deque([0.2])
    four.prefill_costs.append(0.002)
    policy.shared.rate = 6.0
    assert four.draft_cost() == pytest.approx(0.5)
    # Two rows end: the draft's cost over 2 rows is not the one over 4, so the 2-row batch
    # starts from the prior (0.25), keeps the per-token prefill time, rho_B halves.
    policy.plan([DraftOptions(1), DraftOptions(1), None, None], [50, 50, 0, 0])
    two = policy.shared.costs
    assert two is not four
    assert two.draft_cost() == pytest.approx(0.25)
    assert list(two.prefill_costs) == [0.002]
    assert policy.shared.rate == pytest.approx(3.0)
    # Back at 4 rows (continuous batching: two join), the 4-row costs are found again.
    policy.plan([DraftOptions(1)] * 4, [50] * 4)
    assert policy.shared.costs is four
    assert policy.shared.rate == pytest.approx(6.0)


def measured_draft(policy: BatchAdaptivePolicy) -> None:
    """MEASURED_FIRST first drafted tokens judged, 80% accepted: a_1 stays at its prior 0.8,
    and lagging rows may start together."""
    calibration = policy.shared.calibration
    calibration.first_total = float(MEASURED_FIRST)
    calibration.first_accepted = 0.8 * MEASURED_FIRST
    assert calibration.first_token_acceptance() == pytest.approx(0.8)


def test_one_row_measures_the_draft_before_the_others_start() -> None:
    # Every start would pay on the priors; until MEASURED_FIRST first drafted tokens are
    # judged, one row drafts (the one with the most tokens left), the others wait.
    policy = BatchAdaptivePolicy(rows=3, max_tokens=20, packed=True)
    policy.shared.worth_starting = lambda *_: True  # type: ignore[method-assign]
    policy.shared.costs.verify_times[1] = deque([0.2] * 3)
    offers = [DraftOptions(101)] * 3
    assert policy.ready(offers, [60, 80, 70], [1.0] * 3) == [1]
    in_step = [DraftOptions(101), DraftOptions(1), DraftOptions(101)]
    assert policy.ready(in_step, [60, 80, 70], [1.0] * 3) == [1]  # it drafts on alone
    policy.shared.calibration.first_total = float(MEASURED_FIRST)
    assert policy.ready(in_step, [60, 80, 70], [1.0] * 3) == [0, 1, 2]
    # One row alone is no batch: it starts on the priors, as a single sequence does.
    alone = BatchAdaptivePolicy(rows=1, max_tokens=20)
    alone.shared.worth_starting = lambda *_: True  # type: ignore[method-assign]
    assert alone.ready([DraftOptions(101)], [60], [1.0]) == [0]


def test_lagging_rows_start_together_as_far_as_the_tokens_left_repay_their_catch_ups() -> None:
    policy = BatchAdaptivePolicy(rows=3, max_tokens=20, packed=True)
    asked = []

    def worth_starting(catchup: int, remaining: float, width: int) -> bool:
        asked.append((catchup, remaining, width))
        return catchup <= most

    policy.shared.worth_starting = worth_starting  # type: ignore[method-assign]
    measured_draft(policy)
    offers = [DraftOptions(2), DraftOptions(101), DraftOptions(51)]  # two rows lag
    even = [1.0, 1.0, 1.0]
    most = 1000
    # Two steps timed: one may have been cold (twice the usual time), which would halve
    # the catch-ups' price: the lagging rows wait for the third.
    policy.shared.costs.verify_times[1] = deque([0.4, 0.2])
    assert policy.ready(offers, [60, 70, 80], even) == [0]
    assert asked == []
    policy.shared.costs.verify_times[1].append(0.2)
    # One question for both lagging rows: the draft reads 100 + 50 tokens before drafting,
    # repaid by the tokens left of the least of them (70), the target verifying the drafts
    # of all 3 rows packed.
    assert policy.ready(offers, [60, 70, 80], even) == [0, 1, 2]
    assert asked == [(1 + 100 + 50, 70, 3)]
    # Both together do not pay; the row with the most tokens left alone does.
    asked.clear()
    most = 60
    assert policy.ready(offers, [60, 70, 80], even) == [0, 2]
    assert asked == [(151, 70, 3), (1 + 50, 80, 2)]
    # Neither pays: the row in step drafts alone.
    most = 10
    assert policy.ready(offers, [60, 70, 80], even) == [0]
    # In a fixed batch the tokens left count at the row's worth: row 1 (80 left, worth 1)
    # comes before row 2 (40 left, worth 0.5), which does not ride along on row 1's savings.
    asked.clear()
    most = 110
    assert policy.ready(offers, [60, 80, 40], [0.75, 1.0, 0.5]) == [0, 1]
    assert asked == [(151, 20, 3), (101, 80, 2)]


def test_in_a_fixed_batch_a_row_ahead_is_worth_its_share_of_the_tokens_left() -> None:
    # The call ends with its longest row: row 1, 50 tokens from its end where row 0 has 100
    # left, will be done long before (its worth: 0.5 ** 8); an ended row is worth nothing.
    offers, left = [DraftOptions(1), DraftOptions(1), None], [100, 50, 0]
    fixed = BatchAdaptivePolicy(rows=3, max_tokens=20, packed=True, fixed=True)
    assert fixed.worths(offers, left) == [1.0, 0.5**8, 0.0]
    assert [plan.worth for plan in fixed.plan(offers, left)] == [1.0, 0.5**8, 0.0]
    # A row that may copy keeps its worth through the copy plan; 5% from the last row it
    # copies (0.95 ** 8 = 0.66), at half of it (0.004) no copy pays.
    match = DraftOptions(1, torch.zeros(12, dtype=torch.long), 2)
    plans = fixed.plan([offers[0], match, None], [100, 95, 0])
    assert plans[1].copy > 0 and [plan.worth for plan in plans] == [1.0, 0.95**8, 0.0]
    assert fixed.plan([offers[0], match, None], left)[1].copy == 0
    # Where rows join (serving), a token is a token whichever row yields it.
    joining = BatchAdaptivePolicy(rows=3, max_tokens=20, packed=True)
    assert joining.worths(offers, left) == [1.0, 1.0, 0.0]


def test_a_row_ahead_stops_drafting_where_the_last_row_goes_on() -> None:
    # Fresh priors as above, packed. Every row worth 1: rho_w = 2, a row's next token costs
    # 2 x 0.05 = 0.10 to verify, and row 1 at 0.45 goes on (0.2025 > 0.10).
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20, packed=True, fixed=True)
    even = [DraftPlan(model=20), DraftPlan(model=20)]
    assert policy.stopper(even).stop({0: step(0, 0.95), 1: step(0, 0.45)}) == {}
    # Row 1 worth 0.25 (it will end first): rho_w = 1.25, 0.25 x 0.2025 <= 1.25 x 0.05,
    # so it stops and row 0 drafts on alone.
    ahead = [DraftPlan(model=20), DraftPlan(model=20, worth=0.25)]
    assert policy.stopper(ahead).stop({0: step(0, 0.95), 1: step(0, 0.45)}) == {1: "cost"}


def test_a_packed_batch_starts_its_draft_on_the_verification_of_every_rows_drafts() -> None:
    # 4 packed rows lag by 40 tokens each; a draft forward costs 0.2 steps, a verified token
    # 0.1 step, a catch-up token 0.02 steps (156 beyond the usual one: 3.12 steps), a_1 =
    # 0.8. Verified one row at a time, 3 drafted tokens a round would yield 1.55 tokens a
    # step and save 7.1 steps of the 20 left, twice the catch-up; with the target verifying
    # all 4 rows' drafts (a drafted position costs 4 tokens) the best is 1.13: 2.2 steps.
    policy = BatchAdaptivePolicy(rows=4, max_tokens=20, packed=True, fixed=True)
    costs = policy.shared.costs
    costs.verify_times[1] = deque([0.2] * 3)
    costs.verify_times[5] = deque([0.2 + 4 * 0.02])
    costs.verify_times[9] = deque([0.2 + 8 * 0.02])
    costs.draft_costs.append(0.04)
    costs.catchup_costs.append(0.004)
    measured_draft(policy)
    assert policy.shared.worth_starting(157, 20, width=1)
    assert not policy.shared.worth_starting(157, 20, width=4)
    # So not all 4 start; 2 do: 78 tokens of catch-up (1.56 steps) against 5.2 steps saved
    # (2 drafted tokens a round at 1.36 tokens a step, verifying both rows' drafts).
    assert policy.ready([DraftOptions(40)] * 4, [20] * 4, [1.0] * 4) == [0, 1]


def test_a_fixed_batch_weighs_costs_at_its_rows_own_paces() -> None:
    # Steps of 0.5 s. A round of one step where row 0 copies 3 tokens and keeps them (4
    # tokens) and row 1 yields its one: each row's pace moves a tenth of the way to its own.
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20, packed=True, fixed=True)
    policy.shared.costs.verify_times[1] = deque([0.5] * 3)
    policy.shared.costs.verify_times[5] = deque([0.5] * 3)
    policy.update([make_round(3, 3, (1.0,) * 3, 0.0, 0.5, num_copied=3), make_round(0, 0)])
    assert policy.paces == pytest.approx([1.3, 1.0])
    # Row 0 far ahead (worth 0.01), row 1 the last: the costs are weighed at about row 1's
    # own pace, not at the batch's rate (2.3 tokens a step, nearly all row 0's).
    policy.paces = [4.0, 1.0]
    worths = [0.01, 1.0]
    assert weighted_rate(2.3, worths, policy.paces) == pytest.approx(1.04)
    assert weighted_rate(2.3, [1.0, 1.0], None) == 2.3  # rows join: rho_B, never below 2
    assert weighted_rate(1.5, [1.0, 1.0], None) == 2.0


def test_a_row_at_twice_the_pace_of_another_will_end_first() -> None:
    # Both rows 100 tokens from their end, row 0 at 2 tokens a step (50 steps to go), row 1
    # at 1 (100 steps): row 0 is worth 0.5 ** 8 before it is ahead in tokens.
    policy = BatchAdaptivePolicy(rows=2, max_tokens=20, packed=True, fixed=True)
    policy.paces = [2.0, 1.0]
    assert policy.worths([DraftOptions(1), DraftOptions(1)], [100, 100]) == [0.5**8, 1.0]
