"""The summary formulas of dynaspec.core.stats on hand-made round records."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from round_helpers import make_round
from tiny_models import ScriptedModel, shift_rule

import dynaspec
from dynaspec.core.round import Round, StopReason
from dynaspec.core.stats import GenerationStats, Summary


def record(
    drafted: int,
    accepted: int,
    emitted: int,
    *,
    draft_time: float = 0.0,
    target_time: float = 0.0,
    other_time: float = 0.0,
    stop_reason: StopReason = StopReason.MAX,
) -> Round:
    made = make_round(drafted, accepted, (0.9,) * drafted, draft_time, target_time)
    return replace(
        made,
        num_emitted=emitted,
        stop_reason=stop_reason,
        draft_forwards=drafted,
        other_time_s=other_time,
    )


def test_summary_formulas() -> None:
    stats = GenerationStats(
        prompt_tokens=7,
        rounds=[
            record(4, 4, 5, draft_time=0.4, target_time=0.2, other_time=0.01),
            record(4, 1, 2, draft_time=0.4, target_time=0.2, other_time=0.03),
            record(
                2, 0, 1, draft_time=0.2, target_time=0.2, other_time=0.02, stop_reason="confidence"
            ),
            record(0, 0, 1, target_time=0.1, other_time=0.05, stop_reason="length"),
        ],
        wall_time_s=2.25,
    )
    summary = stats.summary()
    assert summary.new_tokens == 5 + 2 + 1 + 1
    assert summary.rounds == 4
    assert summary.mean_accepted_per_round == pytest.approx(5 / 4)
    assert summary.acceptance_rate == pytest.approx(5 / 10)
    assert summary.draft_forwards == 10
    assert summary.target_forwards == 4
    assert summary.wall_time_s == 2.25
    assert summary.tokens_per_s == pytest.approx(9 / 2.25)
    assert summary.draft_time_s == pytest.approx(1.0)
    assert summary.target_time_s == pytest.approx(0.7)
    assert summary.other_time_s == pytest.approx(0.11)
    assert summary.overhead_per_round_s == pytest.approx(0.025)  # median of 4 values
    drafted = sum(r.num_drafted for r in stats.rounds)
    assert (summary.num_drafted, summary.num_accepted) == (
        drafted,
        sum(r.num_accepted for r in stats.rounds),
    )
    assert summary.acceptance_rate == pytest.approx(summary.num_accepted / drafted)


def test_summary_of_nothing_is_all_zero() -> None:
    summary = GenerationStats().summary()
    assert summary == Summary(
        new_tokens=0,
        rounds=0,
        mean_accepted_per_round=0.0,
        acceptance_rate=0.0,
        draft_forwards=0,
        target_forwards=0,
        wall_time_s=0.0,
        tokens_per_s=0.0,
        draft_time_s=0.0,
        target_time_s=0.0,
        other_time_s=0.0,
        overhead_per_round_s=0.0,
    )


def test_target_alone_rounds_have_zero_acceptance_rate_not_a_division_error() -> None:
    stats = GenerationStats(rounds=[record(0, 0, 1), record(0, 0, 1)], wall_time_s=0.5)
    summary = stats.summary()
    assert summary.acceptance_rate == 0.0 and summary.mean_accepted_per_round == 0.0
    assert summary.tokens_per_s == pytest.approx(4.0)


def test_round_time_is_the_sum_of_its_parts() -> None:
    assert record(1, 1, 2, draft_time=0.5, target_time=0.25, other_time=0.125).time_s == 0.875


def test_line_and_dict() -> None:
    stats = GenerationStats(rounds=[record(4, 3, 4, target_time=0.5)], wall_time_s=1.0)
    summary = stats.summary()
    line = summary.line()
    assert "4 tokens in 1.00s (4.0 tok/s)" in line
    assert "1 rounds, 3.00 accepted/round, acceptance 75%" in line
    assert "forwards: target 1, draft 4" in line
    as_dict = summary.to_dict()
    assert as_dict["acceptance_rate"] == 0.75 and set(as_dict) == set(Summary.__annotations__)


def test_generate_fills_the_records() -> None:
    """Records from a real call add up: emitted tokens, forwards, times >= 0, wall time."""
    rule = shift_rule(1, 8)
    target = ScriptedModel.greedy(rule, 8)
    draft = ScriptedModel.greedy(lambda prefix: (prefix[-1] + 1 + len(prefix) % 2) % 8, 8)
    out = dynaspec.generate(
        target, draft, torch.tensor([[0]]), max_new_tokens=9, num_assistant_tokens=3
    )
    stats = out.stats
    summary = stats.summary()
    assert stats.prompt_tokens == 1
    assert summary.new_tokens == out.sequences.shape[1] - 1 == 9
    assert summary.target_forwards == len(target.calls)
    assert summary.draft_forwards == len(draft.calls)
    for r in stats.rounds:
        assert r.draft_time_s >= 0 and r.target_time_s > 0 and r.other_time_s >= 0
        assert len(r.confidences) == r.num_drafted
        assert r.num_accepted <= r.num_drafted and 1 <= r.num_emitted <= r.num_accepted + 1
    assert stats.wall_time_s >= summary.draft_time_s + summary.target_time_s


def test_a_round_serialises_with_asdict() -> None:
    """The round record is plain data: dataclasses.asdict and JSON, enums as their values."""
    import json
    from dataclasses import asdict

    row = json.loads(json.dumps(asdict(record(3, 2, 3, stop_reason=StopReason.COST))))
    assert row["stop_reason"] == "cost" and row["num_drafted"] == 3
    assert row["plan"] == {
        "copy": 0,
        "model": 3,
        "probe": False,
        "copy_choice": None,
        "copy_accepted": 1.0,
        "guess": 0,
        "checked": 0,
        "worth": 1.0,
        "source": "lookup",
    }
