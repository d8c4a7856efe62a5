"""Every schedule makes the same decisions as before the round became a value: scripted
rounds (tests/decision_scenarios.py) replayed through today's policies give the committed
traces, recorded with the policies of 141d887; `adaptive`'s re-recorded when V(1) was
split from the line through forwards over several tokens and a draft (or a copy) was judged
over its whole length (23 of its 27 traces changed by a token or so; the simulated
throughput of every scenario within 1%); the lookup and hybrid ones again when copied
tokens got a prior per agreement (18 of 18 changed; simulated throughput 0.97-1.05x, the
scenarios accepting every copy alike whatever its agreement); three dear-draft ones again
when a probe's catch-up may take 2% of the steps left (simulated time 1.012-1.017x: the
probes a draft that never pays costs); the 7 hybrid ones whose drafts run past their first
token again when the tokens after a draft's first were valued at the continuation
acceptance (simulated time 0.87-0.99x, every one faster; the other 47 unchanged)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from decision_scenarios import SCENARIOS, Outcome, Planned, trace

from dynaspec.core.config import SpecConfig
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Round, StopReason
from dynaspec.policies import make_policy

TRACES = json.loads((Path(__file__).parent / "data" / "decision_traces.json").read_text())


def driver(schedule: str):
    """The scenario's three calls on a policy of `schedule`, through today's protocol."""
    lookahead = 5 if schedule == "heuristic" else 20
    policy = make_policy(SpecConfig(lookahead, num_assistant_tokens_schedule=schedule))
    policy.reset()
    plans: dict[int, DraftPlan] = {}

    def plan(catchup, copy_tokens, agreement, remaining, started):
        copy = torch.zeros(copy_tokens, dtype=torch.long) if copy_tokens else None
        options = DraftOptions(catchup, copy, agreement if copy_tokens else 0, started=started)
        made = policy.plan(options, remaining)
        planned = Planned(made.copy, made.model)
        plans[id(planned)] = made
        return planned

    def start(planned):
        stopper = policy.stopper(plans[id(planned)])
        return lambda i, pos, tok, conf: stopper.should_stop(DraftStep(i, pos, tok, conf))

    def update(planned, o: Outcome):
        made = plans.pop(id(planned))
        policy.update(
            Round(
                plan=made,
                stop_reason=StopReason.MAX,
                num_drafted=o.drafted,
                num_copied=o.copied,
                num_accepted=o.accepted,
                num_emitted=o.accepted + 1,
                num_verified=o.verified,
                agreement=o.agreement,
                catchup=o.catchup,
                draft_forwards=o.draft_forwards,
                confidences=o.confidences,
                draft_time_s=o.draft_time_s,
                target_time_s=o.target_time_s,
            )
        )

    return plan, start, update


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: "/".join(map(str, s)))
def test_decisions_are_those_recorded(scenario) -> None:
    assert trace(driver, *scenario) == TRACES["/".join(map(str, scenario))]


def batch_driver(schedule: str, packed: bool = False):
    """The scenario's calls on a batch of one row (the server with one request): the batch
    rule `BatchAdaptivePolicy` for adaptive (`packed`: over a target that packs its rows, the
    static batch adapter); the others plan each row with its own policy, the single one."""
    from dynaspec.batch import batch_policy

    lookahead = 5 if schedule == "heuristic" else 20
    spec = SpecConfig(lookahead, num_assistant_tokens_schedule=schedule)
    policy = batch_policy(spec, 0, packed=packed)
    if policy is None:  # the row's own policy: the single driver's
        return driver(schedule)
    policy.join()
    plans: dict[int, DraftPlan] = {}

    def plan(catchup, copy_tokens, agreement, remaining, started):
        copy = torch.zeros(copy_tokens, dtype=torch.long) if copy_tokens else None
        options = DraftOptions(catchup, copy, agreement if copy_tokens else 0, started=started)
        made = policy.plan([options], [remaining])[0]
        planned = Planned(made.copy, made.model)
        plans[id(planned)] = made
        return planned

    def start(planned):
        stopper = policy.stopper([plans[id(planned)]])
        return lambda i, pos, tok, conf: bool(stopper.stop({0: DraftStep(i, pos, tok, conf)}))

    def update(planned, o: Outcome):
        made = plans.pop(id(planned))
        policy.update(
            [
                Round(
                    plan=made,
                    stop_reason=StopReason.MAX,
                    num_drafted=o.drafted,
                    num_copied=o.copied,
                    num_accepted=o.accepted,
                    num_emitted=o.accepted + 1,
                    num_verified=o.verified,
                    agreement=o.agreement,
                    catchup=o.catchup,
                    draft_forwards=o.draft_forwards,
                    confidences=o.confidences,
                    draft_time_s=o.draft_time_s,
                    target_time_s=o.target_time_s,
                )
            ]
        )

    return plan, start, update


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: "/".join(map(str, s)))
def test_a_batch_of_one_row_decides_as_one_sequence(scenario, packed: bool) -> None:
    """The batch policy with one row (a request alone in the server) replays the traces of
    the single policy: one rule, whichever loop runs it."""
    if packed and scenario[0] != "adaptive":
        pytest.skip("only the adaptive batch rule reads how the target packs its rows")

    def driver(schedule: str):
        return batch_driver(schedule, packed)

    assert trace(driver, *scenario) == TRACES["/".join(map(str, scenario))]
