"""Scripted rounds for decision traces: the same inputs drive any version of the policies.

A scenario is a sequence of rounds whose random inputs (lookup matches, the draft's
confidences, which drafted tokens the target accepts, forward times) are drawn up front
from a seed; the policy's decisions (the plan, where the draft stops) decide which of them
are used. `trace(driver, ...)` returns the decisions as plain lists, comparable with a
committed trace (tests/data/decision_traces.json).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

MAX_NEW = 400
PROMPT = 60


@dataclass(frozen=True)
class Draw:
    """One round's inputs, drawn before any decision."""

    copy_tokens: int  # tokens a lookup match offers (0: none)
    agreement: int  # how far back the match agrees
    confidences: tuple[float, ...]  # the draft's confidence per model token
    uniforms: tuple[float, ...]  # acceptance draws per drafted position
    noise: float  # forward-time noise factor


def draws(seed: int, rounds: int, lookup: bool) -> Iterator[Draw]:
    """Up to `rounds` rounds' inputs, drawn in order as they are used."""
    rng = random.Random(seed)
    for _ in range(rounds):
        copy = rng.choice([0, 0, 0, 1, 2, 3, 5, 8, 10, 16, 32]) if lookup else 0
        yield Draw(
            copy_tokens=copy,
            agreement=rng.randint(1, 70) if copy else 0,
            confidences=tuple(rng.betavariate(3, 1) for _ in range(40)),
            uniforms=tuple(rng.random() for _ in range(80)),
            noise=rng.uniform(0.8, 1.3),
        )


@dataclass(frozen=True)
class Costs:
    step_s: float  # one target step
    slope_s: float  # per extra verified token
    prefill_s: float  # target seconds per prompt token
    draft_s: float  # one draft forward
    draft_prefill_s: float  # draft seconds per caught-up token
    copy_accept: float  # acceptance of a copied token


COSTS = {
    "cheap-draft": Costs(0.2, 0.004, 0.01, 0.02, 0.001, 0.85),
    "dear-draft": Costs(0.2, 0.05, 0.1, 0.15, 0.01, 0.5),
    "flat-gpu": Costs(0.02, 0.0001, 0.0002, 0.002, 0.00005, 0.7),
}


@dataclass(frozen=True)
class Planned:
    copy: int
    model: int


@dataclass(frozen=True)
class Outcome:
    """What the round did, in the words of the policy's update."""

    drafted: int
    accepted: int
    confidences: tuple[float, ...]
    draft_time_s: float
    target_time_s: float
    verified: int
    draft_forwards: int
    catchup: int
    copied: int
    agreement: int


# driver(kind) -> (plan(catchup|None, copy_tokens, agreement, remaining, started) -> Planned,
#                  start(planned) -> should_stop(index, position, token, confidence) -> bool,
#                  update(planned, Outcome) -> None)
Driver = Callable[..., tuple[Callable, Callable, Callable]]


def trace(driver: Driver, schedule: str, sources: str, costs: str, seed: int) -> list[list]:
    """Runs one scenario; returns per round [copy, model, copied, model_drafted, accepted]."""
    cost = COSTS[costs]
    model, lookup = sources in ("model", "hybrid"), sources in ("lookup", "hybrid")
    plan, start, update = driver(schedule)
    committed, emitted, model_cached, target_cached = PROMPT, 0, 0, 0
    out = []
    for draw in draws(seed, 10_000, lookup):
        room = MAX_NEW - emitted
        if room <= 0:
            break
        catchup = committed - model_cached if model else None
        planned = plan(catchup, draw.copy_tokens, draw.agreement, room, model_cached > 0)
        lookahead = min(planned.copy + planned.model, room - 1)
        copied = min(lookahead, planned.copy)
        more = min(lookahead - copied, planned.model) if model else 0
        stop = start(planned)
        confs: list[float] = []
        for index in range(more):
            confidence = draw.confidences[index]
            confs.append(confidence)
            if stop(copied + index, committed + copied + index, 7, confidence):
                break
        k = len(confs)
        rates = [cost.copy_accept] * copied + confs
        accepted = 0
        while accepted < copied + k and draw.uniforms[accepted] < rates[accepted]:
            accepted += 1
        fed = committed + copied - model_cached if k else 0
        unseen = committed - target_cached
        verified = unseen + copied + k
        target_time = (cost.step_s + cost.slope_s * (verified - 1)) * draw.noise
        if unseen > 1:
            target_time = cost.prefill_s * verified * draw.noise
        draft_time = (k * cost.draft_s + max(fed - 1, 0) * cost.draft_prefill_s) * draw.noise
        update(
            planned,
            Outcome(
                drafted=copied + k,
                accepted=accepted,
                confidences=(1.0,) * copied + tuple(confs),
                draft_time_s=draft_time,
                target_time_s=target_time,
                verified=verified,
                draft_forwards=k,
                catchup=fed,
                copied=copied,
                agreement=draw.agreement if copied else 0,
            ),
        )
        new = min(accepted + 1, room)
        if k:
            model_cached = committed + copied + k - 1
        committed += new
        emitted += new
        target_cached = committed - 1
        model_cached = min(model_cached, committed - 1)
        out.append([planned.copy, planned.model, copied, k, accepted])
    return out


SCENARIOS = [
    (schedule, sources, costs, seed)
    for schedule, sources in [
        ("adaptive", "model"),
        ("adaptive", "lookup"),
        ("adaptive", "hybrid"),
        ("dynamic", "hybrid"),
        ("heuristic", "hybrid"),
        ("constant", "model"),
    ]
    for costs in COSTS
    for seed in range(3)
]
