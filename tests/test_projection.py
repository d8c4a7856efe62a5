"""`dynaspec project`: devicecheck costs x the oracle's acceptance traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynaspec.cli import main
from dynaspec.errors import InputError
from dynaspec.eval.cost_model import CostProfile
from dynaspec.eval.oracle.records import DraftTrace, PromptRecord
from dynaspec.eval.projection import (
    LABEL,
    PairCosts,
    project,
    projection_profile,
    read_pair_costs,
)


def _record(task: str, prompt_id: str, wrong_at: set[int], length: int = 16) -> PromptRecord:
    """A reference 1..length; the draft's teacher-forced guess is wrong at `wrong_at`."""
    new_tokens = tuple(range(1, length + 1))
    guesses = tuple(99 if i in wrong_at else t for i, t in enumerate((*new_tokens, 50)))
    confidences = tuple(0.3 if i in wrong_at else 0.9 for i in range(length + 1))
    return PromptRecord(
        task=task,
        prompt_id=prompt_id,
        num_first=5,
        new_tokens=new_tokens,
        vocab_size=128,
        eos_token_ids=(),
        max_new_tokens=length,
        trace=DraftTrace(guesses, confidences),
        real_oracle=None,
        real_oracle_lossless=None,
        reference_time_s=0.0,
        real_oracle_time_s=0.0,
        trace_time_s=0.0,
        reference_step_s=0.0,
    )


RECORDS = [
    _record("code", "a", {3, 11}),
    _record("code", "b", {6}),
    _record("prose", "c", {1, 2, 5, 9, 13}),
]


def test_profile_charges_the_self_draft_overhead_per_drafted_token() -> None:
    costs = CostProfile(0.010, (0.020, 0.021), 0.0, 0.001, 0.0005).to_json()
    overhead = {
        "lookahead": 4,
        "dynaspec": {"per_round_s": 0.003},
        "dynaspec_target_alone": {"per_round_s": 0.001},
    }
    profile, derivation = projection_profile(costs, overhead)
    assert profile.overhead_s == pytest.approx(0.001)
    assert profile.draft_token_s == pytest.approx(0.010 + 0.002 / 4)
    assert profile.verify_s == (0.020, 0.021) and profile.target_prefill_token_s == 0.001
    assert derivation["overhead_per_drafted_token_s"] == pytest.approx(0.0005)
    unmeasured, _ = projection_profile(costs, None)
    assert unmeasured.overhead_s == 0.0 and unmeasured.draft_token_s == 0.010


def test_free_drafts_and_flat_verification_give_tokens_per_round() -> None:
    """With c_d = 0, T(n) = T(1), no overhead or prefill, a decode's speedup is its tokens per
    round: the oracle (one round per agreeing run) then beats every other policy."""
    free = PairCosts("free", CostProfile(0.0, (0.01,) * 40), {})
    rows = project(RECORDS, [free])
    assert [(row["task"], row["prompts"]) for row in rows] == [
        ("code", 2),
        ("prose", 1),
        ("all", 3),
    ]
    assert rows[0]["oracle"] == pytest.approx(32 / _oracle_rounds(RECORDS[:2]))  # code: 5
    assert rows[2]["oracle"] == pytest.approx(48 / _oracle_rounds(RECORDS))  # all: 11
    for row in rows:
        assert row["oracle"] >= max(row["heuristic"], row["dynamic"], row["adaptive"]) - 1e-9
        assert row["adaptive_share_of_oracle"] == pytest.approx(row["adaptive"] / row["oracle"])


def _oracle_rounds(records: list[PromptRecord]) -> int:
    """Rounds of the oracle: each wrong guess ends one, and the text after the last one
    needs one more (no record here has its last guess wrong)."""
    wrong = [
        guess != token
        for record in records
        for guess, token in zip(record.trace.tokens, record.new_tokens, strict=False)
    ]
    return sum(wrong) + len(records)


def test_expensive_drafts_make_no_policy_pay_but_adaptive_stops_drafting() -> None:
    """Drafting costs more than a target step: every drafted token loses, and only the
    adaptive policy (which learns the costs) drafts nothing and keeps ~1x."""
    costly = PairCosts("costly", CostProfile(0.05, (0.01, 0.05, 0.09, 0.13, 0.17)), {})
    for row in project(RECORDS, [costly]):
        assert row["heuristic"] < 1.0 and row["dynamic"] < 1.0 and row["oracle"] < 1.0
        assert row["adaptive"] > max(row["heuristic"], row["dynamic"], row["oracle"])


def _devicecheck_json(path: Path) -> Path:
    costs = CostProfile(0.002, tuple(0.02 + 0.0005 * n for n in range(32)), 0.0, 1e-4, 2e-5)
    overhead = {"lookahead": 4, "dynaspec": {"per_round_s": 4e-4}}
    overhead["dynaspec_target_alone"] = {"per_round_s": 2e-4}
    pair = {"name": "p", "variants": {"eager": {"costs": costs.to_json(), "overhead": overhead}}}
    data = {"dry_run": False, "provenance": {"device_name": "GPU X"}, "pairs": [pair]}
    path.write_text(json.dumps(data))
    return path


def test_cli_writes_the_labelled_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    costs = _devicecheck_json(tmp_path / "devicecheck.json")
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r.to_json()) + "\n" for r in RECORDS))
    out = tmp_path / "out"
    argv = ["project", "--costs", str(costs), "--records", str(records), "--out", str(out)]
    assert main(argv) == 0
    markdown = (out / "projection.md").read_text()
    assert markdown.startswith(f"# {LABEL}") and "| p | all | 3 |" in markdown
    result = json.loads((out / "projection.json").read_text())
    assert result["costs_device"] == "GPU X" and len(result["rows"]) == 3
    assert result["profiles"]["p"]["overhead_s"] == pytest.approx(2e-4)
    capsys.readouterr()
    assert main([*argv[:2], str(records), *argv[3:]]) == 1  # records given as costs
    assert "not a devicecheck JSON" in capsys.readouterr().err


def test_costs_without_the_variant_are_an_input_error(tmp_path: Path) -> None:
    costs = _devicecheck_json(tmp_path / "devicecheck.json")
    with pytest.raises(InputError, match="no pair with compiled costs"):
        read_pair_costs(costs, "compiled")


def test_a_variant_without_overheads_takes_the_eager_ones(tmp_path: Path) -> None:
    path = _devicecheck_json(tmp_path / "devicecheck.json")
    data = json.loads(path.read_text())
    variants = data["pairs"][0]["variants"]
    variants["compiled"] = {"costs": variants["eager"]["costs"]}  # no overhead block
    path.write_text(json.dumps(data))
    (compiled,) = read_pair_costs(path, "compiled")
    assert compiled.profile.overhead_s == pytest.approx(2e-4)
