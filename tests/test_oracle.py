"""The oracle analysis on scripted fake models whose agreement pattern is known by hand.

The fake target emits, at position p, the token (3p + 1) mod 16 whatever the text; the fake
draft agrees except at three positions (relative to the end of the 4-token prompt: 2, 3 and
9), where it proposes the next token id instead. Its confidence: 0.95 where it is right,
0.25 where it is wrong, and 0.35 at position 5 (right, but not confident). With
max_new_tokens = 20 every number below was worked out on paper, round by round.
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from round_helpers import make_round
from tiny_models import ScriptedModel

import dynaspec
from dynaspec.core.round import DraftOptions, Round
from dynaspec.eval.cost_model import CostProfile
from dynaspec.eval.oracle.args import add_oracle_arguments
from dynaspec.eval.oracle.markdown import render_markdown
from dynaspec.eval.oracle.measure import measure_prompt
from dynaspec.eval.oracle.methods import default_policy_specs
from dynaspec.eval.oracle.records import (
    ORACLE,
    DraftTrace,
    PromptRecord,
    censored_round,
    round_row,
)
from dynaspec.eval.oracle.replay import (
    ReplayDraft,
    ReplayTarget,
    ReplayText,
    SimulatedTimePolicy,
    analyze,
    confident_logits,
    replay,
)
from dynaspec.eval.oracle.run import run_oracle
from dynaspec.eval.oracle.summary import (
    build_summary,
    calibration,
    group_summary,
    read_bench_jsonl,
    run_shares,
)

VOCAB = 16
PROMPT = torch.tensor([[0, 1, 2, 3]])
N0 = 4
MAX_NEW = 20
WRONG = {2, 3, 9}  # new-token positions where the draft is wrong
UNSURE = {5}  # a right token drafted with low confidence
PROFILE = CostProfile(draft_token_s=0.1, verify_s=(1.0, 1.1, 1.2))


def target_token(position: int) -> int:
    return (3 * position + 1) % VOCAB


def draft_token(position: int) -> int:
    wrong = position - N0 in WRONG
    return (target_token(position) + wrong) % VOCAB


def draft_confidence(position: int) -> float:
    if position - N0 in WRONG:
        return 0.25
    return 0.35 if position - N0 in UNSURE else 0.95


def fake_pair() -> tuple[ScriptedModel, ScriptedModel]:
    target = ScriptedModel.greedy(lambda prefix: target_token(len(prefix)), VOCAB)
    draft = ScriptedModel.greedy(
        lambda prefix: draft_token(len(prefix)),
        VOCAB,
        confidence=lambda prefix: draft_confidence(len(prefix)),
    )
    return target, draft


def fake_record(real_oracle: bool = True) -> PromptRecord:
    target, draft = fake_pair()
    return measure_prompt(
        target,
        draft,
        PROMPT,
        task="fake",
        prompt_id="0",
        max_new_tokens=MAX_NEW,
        eos_token_ids=(),
        real_oracle=real_oracle,
    )


def pairs(rounds: tuple[Round, ...]) -> list[tuple[int, int]]:
    return [(r.num_drafted, r.num_accepted) for r in rounds]


# Rounds (drafted, accepted) worked out by hand; positions are relative to the prompt's end.
ORACLE_ROUNDS = [(3, 2), (1, 0), (6, 5), (9, 9)]  # last: 9 = room - 1, cut by length
CONSTANT_ROUNDS = {
    1: [(1, 1), (1, 0), (1, 0), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 1)],
    2: [(2, 2), (2, 0), (2, 2), (2, 2), (2, 2), (2, 2), (2, 2), (0, 0)],
    5: [(5, 2), (5, 0), (5, 5), (5, 5), (3, 3)],
}
DYNAMIC_04_ROUNDS = [(3, 2), (1, 0), (2, 2), (3, 2), (9, 9)]


def test_real_oracle_rounds_and_reference():
    record = fake_record()
    assert list(record.new_tokens) == [target_token(N0 + i) for i in range(MAX_NEW)]
    assert record.num_first == N0
    assert record.real_oracle_lossless is True
    assert pairs(record.real_oracle) == ORACLE_ROUNDS
    assert [censored_round(r) for r in record.real_oracle] == [False, False, False, True]
    # the draft's confidence on each proposed token is recorded
    assert record.real_oracle[0].confidences == pytest.approx((0.95, 0.95, 0.25), abs=1e-6)


def test_draft_trace_is_teacher_forced():
    record = fake_record(real_oracle=False)
    positions = range(N0, N0 + MAX_NEW + 1)
    assert record.trace.tokens == tuple(draft_token(p) for p in positions)
    assert record.trace.confidences == pytest.approx([draft_confidence(p) for p in positions])


def test_replayed_forward_counts_equal_hand_computed_values():
    analysis = analyze(fake_record())
    assert pairs(analysis.replays[ORACLE]) == ORACLE_ROUNDS
    assert analysis.replay_consistent is True
    for k, expected in CONSTANT_ROUNDS.items():
        assert pairs(analysis.replays[f"constant-{k}"]) == expected, k
    assert pairs(analysis.replays["dynamic-0.4"]) == DYNAMIC_04_ROUNDS
    summary = group_summary([analysis], PROFILE)
    counts = summary["forward_counts"]
    assert counts[ORACLE] == {"target": 4, "draft": 19}
    assert counts["constant-1"] == {"target": 11, "draft": 11}
    assert counts["constant-2"] == {"target": 8, "draft": 14}
    assert counts["constant-5"] == {"target": 5, "draft": 23}
    assert counts["dynamic-0.4"] == {"target": 5, "draft": 18}
    assert counts["oracle (real run)"] == counts[ORACLE]


def test_replay_equals_real_decoding_for_every_policy():
    """The fake draft ignores its context, so even off the reference path the replay's
    approximation is exact here: every policy's real rounds must be reproduced."""
    analysis = analyze(fake_record(), profile=PROFILE)
    reference = list(PROMPT[0].tolist()) + list(analysis.record.new_tokens)
    for spec in default_policy_specs(include_adaptive=False):
        target, draft = fake_pair()
        out = dynaspec.generate(
            target, draft, PROMPT, max_new_tokens=MAX_NEW, policy=spec.make(reference)
        )
        assert out.sequences[0].tolist() == reference, spec.name
        rows = [round_row(r, with_confidences=True) for r in out.stats.rounds]
        replayed = [round_row(r, with_confidences=True) for r in analysis.replays[spec.name]]
        assert rows == replayed, spec.name


def test_distribution_shares_and_histogram():
    summary = group_summary([analyze(fake_record())], PROFILE)
    assert summary["rounds"] == 4
    assert summary["censored_rounds"] == 1
    assert summary["lookahead_histogram"] == {"1": 1, "3": 1, "6": 1}
    assert summary["oracle_lookahead"]["mean"] == pytest.approx(10 / 3)
    assert summary["oracle_lookahead"]["p50"] == 3
    assert summary["agreeing_run"]["mean"] == pytest.approx(7 / 3)
    shares = summary["run_shares"]
    assert {label: v["count"] for label, v in shares.items()} == {
        "0": 1,
        "1-2": 1,
        "3-5": 1,
        "6-10": 0,
        ">10": 0,
    }
    assert shares["0"]["share"] == pytest.approx(1 / 3)
    assert summary["per_prompt"][0]["mean_oracle_lookahead"] == pytest.approx(10 / 3)


def test_calibration_bins():
    summary = group_summary([analyze(fake_record())], PROFILE)
    bins = {round(b["low"], 1): (b["count"], b["accepted"]) for b in summary["calibration"]}
    assert bins[0.2] == (3, 0)  # the three wrong positions, confidence 0.25
    assert bins[0.3] == (1, 1)  # position 5, right with 0.35
    assert bins[0.9] == (16, 16)
    assert sum(count for count, _ in bins.values()) == MAX_NEW
    assert summary["draft_token_accuracy"] == pytest.approx(17 / 20)


def test_run_shares_bin_edges():
    shares = run_shares([0, 1, 2, 3, 5, 6, 10, 11, 40])
    assert {k: v["count"] for k, v in shares.items()} == {
        "0": 1,
        "1-2": 2,
        "3-5": 2,
        "6-10": 2,
        ">10": 2,
    }


def test_calibration_edges():
    bins = calibration([(0.0, False), (0.999, True), (1.0, True)], bins=10)
    assert (bins[0]["count"], bins[9]["count"], bins[9]["rate"]) == (1, 2, 1.0)
    assert bins[5]["rate"] is None


def test_record_json_roundtrip():
    record = fake_record()
    again = PromptRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again.new_tokens == record.new_tokens
    assert again.trace.tokens == record.trace.tokens
    assert pairs(again.real_oracle) == pairs(record.real_oracle)
    replayed, original = analyze(again, profile=PROFILE), analyze(record, profile=PROFILE)
    for method, rounds in original.replays.items():
        assert pairs(replayed.replays[method]) == pairs(rounds), method


def test_replay_adapters_give_recorded_argmax_and_confidence():
    logits = confident_logits(3, 0.3, 10)
    probs = torch.softmax(logits, -1)
    assert int(probs.argmax()) == 3 and float(probs[3]) == pytest.approx(0.3)
    tiny = confident_logits(2, 0.01, 10)  # below 1/V: clamped, still the argmax
    assert int(tiny.argmax()) == 2
    target = ReplayTarget([0, 0, 5, 6, 7], num_first=2, vocab_size=8)
    first = target.begin(torch.zeros(1, 2, dtype=torch.long))
    assert first.tolist() == [0, 0]
    assert target.forward(first, 1).argmax(-1).tolist() == [5]
    assert target.forward(torch.tensor([5, 1]), 2).argmax(-1).tolist() == [6, 7]
    assert target.forward(torch.tensor([7]), 1).argmax(-1).tolist() == [0]  # past the end
    draft = ReplayDraft(DraftTrace((5, 4, 7), (0.9, 0.5, 0.6)), num_first=2, vocab_size=8)
    draft.begin(first[None])
    row = draft.forward(first, 1)[0]
    assert int(row.argmax()) == 5 and float(torch.softmax(row, -1)[5]) == pytest.approx(0.9)
    assert int(draft.forward(torch.tensor([1]), 1)[0].argmax()) == 4  # off path: trace at p
    draft.crop(2)
    assert draft.num_cached == 2


def test_replay_text_shrinks_vocabulary():
    record = fake_record()
    text = ReplayText.of(record)
    assert text.vocab_size <= record.vocab_size
    assert len(text.reference) == N0 + MAX_NEW


def test_simulated_time_policy_hands_cost_model_times():
    seen = []

    class Recorder(dynaspec.ConstantPolicy):
        def update(self, result):
            seen.append((result.draft_time_s, result.target_time_s, result.num_verified))

    rounds = replay(fake_record(), lambda _ref: Recorder(2), PROFILE)
    assert len(seen) == len(rounds)
    draft_s, target_s, verified = seen[1]
    assert (draft_s, target_s, verified) == (pytest.approx(0.2), pytest.approx(1.2), 3)
    wrapped = SimulatedTimePolicy(dynaspec.DynamicPolicy(20, 0.4), PROFILE)
    assert wrapped.name == "dynamic"
    # The wrapper hands on the inner policy's plan and stopper (and so its needs_confidence).
    stopper = wrapped.stopper(wrapped.plan(DraftOptions(1), None))
    assert stopper.reason == "confidence" and stopper.needs_confidence
    adaptive = SimulatedTimePolicy(dynaspec.AdaptivePolicy(20), PROFILE)
    copy = DraftOptions(1, torch.tensor([3, 4]), 2)
    assert adaptive.plan(copy, None) == adaptive.inner.plan(copy, None)


def test_simulated_time_policy_charges_catchups_at_the_prefill_rate():
    seen = []

    class Recorder(dynaspec.ConstantPolicy):
        def update(self, result):
            seen.append((result.draft_time_s, result.target_time_s))

    profile = CostProfile(
        draft_token_s=0.1,
        verify_s=(1.0, 1.1),
        target_prefill_token_s=0.3,
        draft_prefill_token_s=0.05,
    )
    wrapped = SimulatedTimePolicy(Recorder(2), profile)
    # The prompt round: the draft catches up 8 tokens, then drafts 1 more; the target
    # verifies the 8 prompt tokens + 2 drafted.
    wrapped.update(make_round(2, 1, (0.9, 0.9), 9.0, 9.0, 10, 2, catchup=8))
    # 8 x 0.05 + (2 - 1) x 0.1 for the draft, 10 x 0.3 for the target
    assert seen[0] == (pytest.approx(0.5), pytest.approx(3.0))
    wrapped.update(make_round(1, 1, (0.9,), 9.0, 9.0, 2, 1, catchup=1))
    assert seen[1] == (pytest.approx(0.1), pytest.approx(1.1))  # a usual round: c_d, T(2)


def test_tiny_llama_replay_matches_real_static_and_oracle_runs():
    """On real (tiny, fp32) models the replay reproduces the real rounds of policies that do
    not look at the confidence, and of the oracle."""
    from dynaspec.models.tiny import TinyPairConfig, tiny_pair

    target, draft, _ = tiny_pair(TinyPairConfig())
    prompt = torch.tensor([[17, 99, 3, 250, 41, 8, 77, 120]])
    record = measure_prompt(
        target,
        draft,
        prompt,
        task="tiny",
        prompt_id="0",
        max_new_tokens=24,
        eos_token_ids=(),
    )
    analysis = analyze(record, default_policy_specs(static=(3,), thresholds=()))
    assert record.real_oracle_lossless is True
    assert analysis.replay_consistent is True
    real = dynaspec.generate(
        target, draft, prompt, max_new_tokens=24, eos_token_id=[], policy=dynaspec.ConstantPolicy(3)
    )
    assert pairs(tuple(real.stats.rounds)) == pairs(analysis.replays["constant-3"])


def test_bench_jsonl_is_read_defensively(tmp_path):
    path = tmp_path / "bench.jsonl"
    lines = [
        {"task": "code", "method": "constant", "speedup_vs_target": 1.5},
        {"task": "code", "method": "constant", "speedup_vs_target": 2.5},
        {"task": "code", "method": "dynamic", "speedup": 1.2},
        {"task": "code", "method": "target", "speedup": None},
        {"task": "code", "speedup": 1.0},
        {"task": "code", "method": "oracle", "speedup": float("nan")},
        [1, 2],
    ]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n\n")
    bench = read_bench_jsonl(path)
    assert bench["records"] == 3 and bench["skipped"] == 5
    assert bench["speedups"]["code"] == {"constant": 2.0, "dynamic": 1.2}
    assert bench["speedups"]["overall"]["constant"] == 2.0
    assert read_bench_jsonl(tmp_path / "missing.jsonl")["records"] == 0
    summary = build_summary([analyze(fake_record())], PROFILE, {"command": "x"}, bench)
    assert summary["groups"]["fake"]["measured_speedup"] == {}
    text = render_markdown(summary)
    assert "Oracle lookahead report" in text and "constant-5" in text


def oracle_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_oracle_arguments(parser)
    return parser.parse_args(list(argv))


def test_smoke_end_to_end(tmp_path):
    out = tmp_path / "oracle"
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"task": "code", "method": "constant", "speedup": 0.8}) + "\n")
    args = oracle_args(
        "--smoke",
        "--n",
        "1",
        "--max-new-tokens",
        "16",
        "--out",
        str(out),
        "--cost-reps",
        "1",
        "--no-progress",
        "--bench-jsonl",
        str(bench),
    )
    assert run_oracle(args) == 0
    names = {p.name for p in out.iterdir()}
    for name in (
        "oracle_records.jsonl",
        "oracle_costs.json",
        "oracle_summary.json",
        "oracle_report.md",
        "oracle_lookahead_hist.png",
        "per_prompt_mean_lookahead.png",
        "forward_counts.png",
        "calibration.png",
        "timeline.png",
        "predicted_speedup.png",
    ):
        assert name in names, name
    summary = json.loads((out / "oracle_summary.json").read_text())
    assert summary["tasks"] == ["summarization", "open-ended", "code"]
    config = summary["config"]
    assert (config["dtype"], config["dtype_reason"]) == (
        "float32",
        "the built-in tiny pair is float32",
    )
    assert {"avx2", "avx512_bf16", "amx_bf16"} <= set(config["machine"]["cpu_features"])
    overall = summary["groups"]["overall"]
    assert overall["prompts"] == 3
    assert overall["consistency"]["prompts_consistent"] == 3
    assert overall["consistency"]["real_oracle_lossless"] == 3
    assert summary["groups"]["code"]["measured_speedup"] == {"constant": 0.8}
    assert "0.80x" in (out / "oracle_report.md").read_text()
    # --resume with every prompt measured re-renders without measuring again
    before = (out / "oracle_records.jsonl").read_text()
    assert (
        run_oracle(
            oracle_args(
                "--smoke",
                "--n",
                "1",
                "--max-new-tokens",
                "16",
                "--out",
                str(out),
                "--resume",
                "--no-progress",
            )
        )
        == 0
    )
    assert (out / "oracle_records.jsonl").read_text() == before


def test_a_certain_replayed_draft_has_finite_logits() -> None:
    # The loop refuses non-finite logits from any model, replays included (a draft that was
    # certain used to get -inf for every other token, and `dynaspec project` failed on it).
    from dynaspec.eval.oracle.replay import confident_logits

    logits = confident_logits(3, 1.0, 8)
    assert bool(torch.isfinite(logits).all())
    assert int(logits.argmax()) == 3 and float(torch.softmax(logits, -1)[3]) == 1.0
