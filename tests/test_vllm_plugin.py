"""The vLLM proposers' contract, without vLLM: a simulated engine (vllm_sim.py) drives them
the way vLLM's V1 runner calls a `custom_class` proposer, with rows that move, finish, are
preempted and come back, ragged and cut drafts. Whatever the proposer drafts, the output
must be the target's own; the requests must be told apart without ids; the copy rule must
follow the measured batch cost. The end-to-end run inside vLLM: test_vllm_e2e.py."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from dynaspec.errors import ConfigError
from dynaspec.integrations.vllm import (
    DraftModelProposer,
    LookupProposer,
    ProposerSettings,
    RequestTracker,
)
from tests.vllm_sim import Chaos, SimEngine, alone, looping_target

K = 5


def lookup(k: int = K, clock=None, **fields) -> LookupProposer:
    settings = ProposerSettings(num_speculative_tokens=k, vocab_size=12, **fields)
    kwargs = {"clock": clock} if clock is not None else {}
    return LookupProposer(settings=settings, **kwargs)


def prompts(count: int, seed: int = 0, length: int = 12) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(12) for _ in range(length)] for _ in range(count)]


def check_lossless(engine: SimEngine, target, requests) -> None:
    for request in requests:
        want = alone(target, request.prompt, request.max_tokens)
        assert request.out[: request.max_tokens] == want


# ---- losslessness under everything the engine does ------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_lookup_proposer_is_lossless_under_chaos(seed):
    target = looping_target()
    chaos = Chaos(swap=0.5, preempt=0.15, cut=0.3, away_steps=3)
    engine = SimEngine(lookup(), target, max_num_seqs=3, chaos=chaos, seed=seed, k=K)
    requests = [engine.add(p, 40, prefill_chunks=1 + i % 3) for i, p in enumerate(prompts(7, seed))]
    engine.run()
    assert len(engine.finished) == len(requests)
    check_lossless(engine, target, requests)
    assert sum(map(len, sum(engine.proposals, []))) > 0, "it never drafted: nothing was tested"


def test_duplicate_prompts_are_served_and_lossless():
    target = looping_target()
    engine = SimEngine(lookup(), target, max_num_seqs=4, chaos=Chaos(swap=0.5), seed=1)
    same = prompts(1, seed=3)[0]
    requests = [engine.add(same, 30) for _ in range(4)]
    engine.run()
    check_lossless(engine, target, requests)


# ---- bookkeeping: rows matched to requests ---------------------------------------------------
def test_requests_are_told_apart_when_rows_move():
    """Every row is matched to its request at every step although rows swap and condense:
    each request is new once, and the verdicts the proposer learns are the engine's."""
    target = looping_target()
    proposer = lookup()
    engine = SimEngine(proposer, target, max_num_seqs=3, chaos=Chaos(swap=0.7), seed=5)
    requests = [engine.add(p, 40) for p in prompts(6, seed=5)]
    engine.run()
    assert proposer.stats.requests == len(requests)
    assert proposer.stats.drafted == sum(r.drafted for r in requests) > 0
    assert proposer.stats.accepted == sum(r.accepted for r in requests)


def test_a_preempted_request_is_recognised_when_it_comes_back():
    target = looping_target()
    proposer = lookup()
    engine = SimEngine(proposer, target, max_num_seqs=2, chaos=Chaos(preempt=0.3), seed=2)
    requests = [engine.add(p, 40) for p in prompts(4, seed=2)]
    engine.run()
    check_lossless(engine, target, requests)
    assert proposer.stats.requests == len(requests)  # none was taken for a new one
    # its dropped drafts were never judged: the proposer counts what the engine verified
    assert proposer.stats.drafted == sum(r.drafted for r in requests)


def test_tracker_forgets_requests_that_left():
    tracker = RequestTracker(capacity=8, max_idle_steps=3)
    token_ids = np.zeros((1, 64), dtype=np.int32)
    for request in range(20):  # 20 requests, one step each, never seen again
        token_ids[0, :3] = [request, 1, 2]
        (row,) = tracker.rows([[2]], np.array([3]), token_ids)
        tracker.file(row, None)
    assert len(tracker) <= 4


def test_row_without_new_tokens_gets_no_draft():
    proposer = lookup()
    token_ids = np.array([[1, 2, 1, 2, 1, 2, 1, 2]], dtype=np.int32)
    assert proposer.propose([[]], np.array([8]), token_ids) == [[]]


# ---- the batch-cost model ----------------------------------------------------------------------
def _steady_engine(step_cost, seed=0):
    now = [0.0]
    proposer = lookup(k=8, clock=lambda: now[0])
    engine = SimEngine(
        proposer,
        looping_target(flip_every=97),
        max_num_seqs=4,
        k=8,
        step_cost=step_cost,
        clock=now,
        seed=seed,
    )
    for p in prompts(4, seed=seed, length=24):
        engine.add(p, 120)
    engine.run()
    return proposer, engine


def test_cost_model_fits_the_step_line():
    """Steps timed on a fake clock at T(N) = 0.2 + 0.01 N: the fitted V(1) and slope are
    the line's (the proposer's own time is 0 on this clock)."""
    proposer, _ = _steady_engine(lambda n: 0.2 + 0.01 * n)
    summary = proposer.summary()
    assert summary["step_s"] == pytest.approx(0.21, rel=0.02)
    assert summary["slope_s_per_token"] == pytest.approx(0.01, rel=0.05)


def test_copies_stop_where_a_verified_token_costs_too_much():
    """The same requests under a cheap and a dear marginal token: R * b decides (steps.py)."""
    cheap, cheap_engine = _steady_engine(lambda n: 0.2 + 0.001 * n)
    dear, dear_engine = _steady_engine(lambda n: 0.02 + 0.2 * n)
    assert cheap.stats.proposed > 3 * max(dear.stats.proposed, 1)
    assert cheap_engine.steps < dear_engine.steps


# ---- settings -----------------------------------------------------------------------------------
def _vllm_config(k=4, eos=2, vocab=32):
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=k),
        model_config=SimpleNamespace(hf_config=SimpleNamespace(eos_token_id=eos, vocab_size=vocab)),
        scheduler_config=SimpleNamespace(max_num_seqs=16),
    )


def test_settings_come_from_vllm_and_the_environment():
    settings = ProposerSettings.from_vllm(
        _vllm_config(eos=[2, 7]), {"DYNASPEC_VLLM_NGRAM": "4", "DYNASPEC_VLLM_SCHEDULE": "dynamic"}
    )
    assert settings.num_speculative_tokens == 4
    assert settings.eos_token_ids == (2, 7)
    assert (settings.ngram, settings.schedule, settings.max_num_seqs) == (4, "dynamic", 16)


@pytest.mark.parametrize(
    "env, words",
    [
        ({"DYNASPEC_VLLM_SCHEDULE": "fast"}, "DYNASPEC_VLLM_SCHEDULE"),
        ({"DYNASPEC_VLLM_NGRAM": "two"}, "whole number"),
        ({"DYNASPEC_VLLM_NGRAM": "0"}, "DYNASPEC_VLLM_NGRAM"),
    ],
)
def test_bad_settings_name_the_variable(env, words):
    with pytest.raises(ConfigError, match=words):
        ProposerSettings.from_vllm(_vllm_config(), env)


def test_draft_model_proposer_needs_a_draft():
    with pytest.raises(ConfigError, match="DYNASPEC_VLLM_DRAFT"):
        DraftModelProposer(_vllm_config(), clock=lambda: 0.0)


def test_the_copy_never_crosses_eos():
    proposer = LookupProposer(settings=ProposerSettings(5, eos_token_ids=(9,), vocab_size=12))
    token_ids = np.array([[1, 2, 3, 9, 4, 1, 2, 3]], dtype=np.int32)
    (draft,) = proposer.propose([[3]], np.array([8]), token_ids)
    assert 9 not in draft


# ---- the draft model proposer, on the tiny pair -------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    from dynaspec.models.tiny import tiny_pair

    target, draft, _ = tiny_pair()
    return target, draft


def _greedy(model):
    @torch.no_grad()
    def target(tokens: list[int]) -> int:
        return int(model(torch.tensor([tokens])).logits[0, -1].argmax())

    return target


@pytest.mark.parametrize("schedule", ["adaptive", "dynamic"])
def test_draft_model_proposer_is_lossless(tiny, schedule):
    model, draft = tiny
    target = _greedy(model)
    settings = ProposerSettings(num_speculative_tokens=4, vocab_size=257, schedule=schedule)
    proposer = DraftModelProposer(settings=settings, model=draft)
    chaos = Chaos(swap=0.5, preempt=0.1, cut=0.2)
    engine = SimEngine(proposer, target, max_num_seqs=2, chaos=chaos, seed=3, k=4)
    requests = [engine.add(list(b"def f(x):" + bytes([i])), 16) for i in range(3)]
    engine.run()
    check_lossless(engine, target, requests)
    assert proposer.stats.proposed > 0
    assert proposer.stats.accepted > 0  # the draft is the target plus a little noise


def test_each_request_learns_its_own_copies_on_the_shared_costs():
    """What one request's copies teach (here: all rejected) does not make another request
    copy less; what a step costs is learned once for all."""
    from dynaspec.core.round import DraftPlan, Round, StopReason
    from dynaspec.integrations.vllm.proposers import RequestPolicy
    from dynaspec.integrations.vllm.requests import Request

    proposer = lookup()
    first, second = Request(), Request()
    a, b = proposer.policy(first), proposer.policy(second)
    assert isinstance(a, RequestPolicy) and a.costs is b.costs is proposer.shared.costs
    before = b.lookup.prefix_probs(4, 5)
    rejected = Round(DraftPlan(copy=5), StopReason.MAX, 5, 5, 0, 1, 6, 4, 0, 0, (1.0,) * 5, 0, 0)
    for _ in range(20):
        a.learn_tokens(rejected)
    assert a.lookup.prefix_probs(4, 5)[0] < 0.2
    assert b.lookup.prefix_probs(4, 5) == before
