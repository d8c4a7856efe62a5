"""Every round of the adaptive batch rule, logged: what each row was offered and planned,
what it drafted and kept, the forwards' times and the rule's estimates, one JSON line per
round. It wraps `BatchAdaptivePolicy.plan` and `update` and runs the dynaspec CLI.

Run: python benchmarks/batch/batch_rounds.py ROUNDS.jsonl bench --pair qwen2.5-coder --batch 4 ...
     python benchmarks/batch/batch_rounds.py --summary ROUNDS.jsonl[.gz]  (a line per generate call)

A line: rows (the batch size the estimates stand for), plan (per row: catchup, ncopy (copy
on offer), agree, copy, model (planned), worth, rem (tokens left); null: ended), r (per row:
dr drafted, cp copied, acc accepted, ver verified, cu catch-up, df draft forwards, dt draft
s, tt target s), rate (rho_B), step (s), c (draft cost, steps), v (V(n) at n = 2, 5, 9, 17,
33, steps), a1 (first-token acceptance), paces (a fixed batch's rows' own).
"""

from __future__ import annotations

import gzip
import json
import sys
import time

from dynaspec import cli
from dynaspec.policies import batch_adaptive


def log_rounds(path: str) -> None:
    out = open(path, "w")  # noqa: SIM115 - open for the whole run
    plan, update = (
        batch_adaptive.BatchAdaptivePolicy.plan,
        batch_adaptive.BatchAdaptivePolicy.update,
    )
    planned: dict[str, list] = {}

    def logged_plan(self, options, remaining):  # noqa: ANN001, ANN202
        plans = plan(self, options, remaining)
        planned["rows"] = [
            None
            if offer is None
            else {"catchup": offer.catchup, "ncopy": offer.num_copy, "agree": offer.agreement,
                  "copy": made.copy, "model": made.model, "worth": round(made.worth, 3),
                  "rem": left}
            for offer, made, left in zip(options, plans, remaining, strict=True)
        ]  # fmt: skip
        return plans

    def logged_update(self, rounds):  # noqa: ANN001, ANN202
        costs = self.shared.costs
        row = [
            None
            if r is None
            else {"dr": r.num_drafted, "cp": r.num_copied, "acc": r.num_accepted,
                  "ver": r.num_verified, "cu": r.catchup, "df": r.draft_forwards,
                  "dt": round(r.draft_time_s, 4), "tt": round(r.target_time_s, 4)}
            for r in rounds
        ]  # fmt: skip
        line = {
            "t": time.time(), "rows": self.rows, "plan": planned.get("rows"), "r": row,
            "rate": round(self.shared.rate, 3), "step": round(costs.step_time(), 4),
            "c": round(costs.draft_cost(), 3),
            "v": [round(costs.verify_cost(n), 3) for n in (2, 5, 9, 17, 33)],
            "a1": round(self.shared.calibration.first_token_acceptance(), 3),
            "paces": None if self.paces is None else [round(p, 3) for p in self.paces],
        }  # fmt: skip
        out.write(json.dumps(line) + "\n")
        out.flush()
        return update(self, rounds)

    batch_adaptive.BatchAdaptivePolicy.plan = logged_plan
    batch_adaptive.BatchAdaptivePolicy.update = logged_update


def summary(path: str) -> None:
    """One line per generate call: rounds, seconds of draft and target forwards, catch-ups."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as records:
        lines = [json.loads(text) for text in records]
    calls: list[list[dict]] = []
    for line in lines:
        first = line["r"][0]
        if not calls or (first is not None and first["ver"] > 100):  # a prefill: a new call
            calls.append([])
        calls[-1].append(line)
    for index, call in enumerate(calls):
        rounds = [[row for row in line["r"] if row is not None] for line in call]
        draft = sum(max(row["dt"] for row in rows) for rows in rounds)
        target = sum(max(row["tt"] for row in rows) for rows in rounds[1:])  # after the prefill
        catchup = sum(row["cu"] for rows in rounds for row in rows if row["cu"] > 2)
        print(
            f"call {index}: {len(call)} rounds, draft {draft:.1f} s, target after the "
            f"prefill {target:.1f} s, catch-up tokens {catchup}"
        )


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        log_rounds(sys.argv[1])
        sys.argv = ["dynaspec", *sys.argv[2:]]
        sys.exit(cli.main())
