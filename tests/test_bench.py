"""`dynaspec bench`: the smoke run end to end, the aggregation, the mismatch classifier."""

from __future__ import annotations

import argparse
import json
import logging
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import dynaspec
from dynaspec.errors import ConfigError
from dynaspec.eval import provenance
from dynaspec.eval.bench import aggregate, plots, report
from dynaspec.eval.bench import args as bench_args
from dynaspec.eval.bench import methods as bench_methods
from dynaspec.eval.bench import prompt_record as bench_record
from dynaspec.eval.bench import run as bench
from dynaspec.eval.bench.aggregate import median_of_ratios, per_prompt_ratios
from dynaspec.eval.bench.measurement import Measurement, MethodOutput, speedup
from dynaspec.eval.bench.methods import parse_methods
from dynaspec.eval.bench.record import BenchRecord, load_records
from dynaspec.eval.bench.report import render_markdown, render_report
from dynaspec.eval.hf_peer import HF_HEURISTIC, HFPeer, rounds_from_target_calls
from dynaspec.mismatch import (
    Divergence,
    classify_logits,
    classify_mismatch,
    dtype_step,
    first_difference,
)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_args.add_bench_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    args = _parse(["--smoke", "--max-new-tokens", "8", "--no-progress", "--out", str(out)])
    status = bench.run_bench(args)
    return status, out


def test_smoke_run_writes_a_matching_record_per_prompt_and_method(smoke_run):
    status, out = smoke_run
    assert status == 0
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    methods = set(bench_methods.DEFAULT_METHODS)
    prompts = {(r["task"], r["prompt_id"]) for r in records}
    assert len(prompts) == len(bench.SMOKE_PROMPTS) * bench_args.SMOKE_N
    assert Counter((r["task"], r["prompt_id"], r["method"]) for r in records) == {
        (task, prompt_id, method): 1 for task, prompt_id in prompts for method in methods
    }
    assert all(r["matches_target"] for r in records), [r for r in records if r["mismatch"]]
    for record in records:
        # each round commits its accepted tokens + one; EOS or the length limit may cut it
        rounds, accepted = record["rounds"], sum(record["accepted_per_round"])
        assert rounds == len(record["accepted_per_round"])
        assert rounds <= record["new_tokens"] <= rounds + accepted
        assert len(record["accepted_per_round"]) == len(record["drafted_per_round"])
        assert record["wall_time_s"] > 0 and record["speedup_vs_target"] > 0
        run = record["run"]
        assert run["config"]["max_new_tokens"] == 8
        assert {"torch", "transformers", "dynaspec"} <= set(run["versions"])
        assert {"platform", "cpu_count", "torch_threads"} <= set(run["machine"])
        # every record names the CPU's instruction sets and the dtype rule's choice and reason
        assert {"avx2", "avx512_bf16", "amx_bf16", "torch_cpu_capability"} <= set(
            run["machine"]["cpu_features"]
        )
        assert {"machine_dtype", "machine_dtype_reason"} <= set(run["machine"])
        assert run["config"]["dtype_reason"] == "the built-in tiny pair is float32"
        assert {"sha", "dirty"} <= set(run["git"])
        assert isinstance(run["sklearn_available"], bool)
        assert "--smoke" in run["command"]
    assert (out / "command.txt").read_text().strip()


def test_a_smoke_run_explains_itself_and_writes_outside_the_work_tree(tmp_path, monkeypatch, capfd):
    from transformers.utils import logging as hf_logging

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench.tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    hf_logging.warning_once.cache_clear()  # transformers warns once per process
    said: list[str] = []
    listener = logging.Handler()
    listener.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("transformers.generation.utils")
    logger.addHandler(listener)
    argv = ["--smoke", "--methods", "target,hf-dynamic", "--max-new-tokens", "4", "--no-progress"]
    try:
        assert bench.run_bench(_parse(argv)) == 0
    finally:
        logger.removeHandler(listener)
    # transformers' warning about its own code (its assistant's generate() call)
    assert not [line for line in said if "generation_config" in line], said
    out, err = capfd.readouterr()
    assert not (tmp_path / "benchmarks").exists()  # nothing written into the work tree
    [folder] = (tmp_path / "temp").iterdir()
    assert (folder / "results.jsonl").is_file() and f"-> {folder}" in err
    assert bench.SMOKE_NOTE in out and "expected to be slower" in bench.SMOKE_NOTE
    table = (folder / "table.md").read_text()
    assert bench.SMOKE_NOTE in table and "scikit-learn" not in table


@pytest.mark.parametrize(
    ("ours", "theirs"), [("heuristic", "hf-heuristic"), ("dynamic", "hf-dynamic-0.4")]
)
def test_transformers_takes_the_same_rounds_as_dynaspec(smoke_run, ours, theirs):
    """transformers' assisted generation and ours take the same decisions on the same draft
    (`hf-dynamic-0.4`: transformers' threshold tuning is off, whether or not scikit-learn is
    installed)."""
    _, out = smoke_run
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_key = {(r["task"], r["prompt_id"], r["method"]): r for r in records}
    prompts = {(r["task"], r["prompt_id"]) for r in records}
    for task, prompt_id in prompts:
        mine, peer = by_key[(task, prompt_id, ours)], by_key[(task, prompt_id, theirs)]
        assert mine["accepted_per_round"] == peer["accepted_per_round"]
        assert mine["drafted_per_round"] == peer["drafted_per_round"]


def test_smoke_report_has_the_columns_and_plots(smoke_run):
    _, out = smoke_run
    table = (out / "table.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| target | draft"))
    cells = [cell.strip() for cell in header.strip("|").split("|")]
    assert cells == list(report.TABLE_HEADERS)
    for column in ("heuristic", "dynamic", "constant", "adaptive", "adaptive-warm", "oracle"):
        assert column in cells
    assert {"HF heuristic", "HF dynamic", "dyn / HF dyn", "mismatches"} <= set(cells)
    assert "| smoke-short |" in table and "| all |" in table
    for plot in (plots.SPEEDUP_PLOT, plots.ACCEPTED_PLOT):
        assert (out / plot).stat().st_size > 1000
    # re-rendering from the JSONL alone gives the same table
    again = render_report(out / "results.jsonl", out / "again")
    assert again == table


def _record(task, prompt, method, wall, accepted=(), matches_target=True, kind=None):
    measurement = Measurement(
        family="dynaspec",
        new_tokens=1,
        wall_time_s=wall,
        tokens_per_s=1 / wall if wall else None,
        rounds=len(accepted),
        mean_accepted_per_round=None,
        acceptance_rate=None,
        draft_forwards=0,
        target_forwards=1,
        draft_time_s=None,
        target_time_s=None,
        other_time_s=None,
        inner_wall_time_s=wall,
        stop_reasons=None,
        accepted_per_round=tuple(accepted),
        drafted_per_round=tuple(accepted),
    )
    mismatch = None
    if kind is not None:
        mismatch = Divergence(0, 1, 2, 1, 1.0, 0.0, 0.0, 0.1, 0.0, "bfloat16", kind)
    return BenchRecord(
        task=task,
        prompt_id=prompt,
        prompt_index=0,
        prompt_tokens=1,
        method=method,
        order_in_prompt=0,
        load_avg_1m=None,
        measurement=measurement,
        speedup_vs_target=None,
        matches_target=matches_target,
        mismatch=mismatch,
        output_sha="",
    )


def _made(method, prompt, tokens, wall):
    """A record of task "a" that made `tokens` new tokens in `wall` seconds."""
    record = _record("a", prompt, method, wall)
    rate = tokens / wall if wall else None
    return replace(
        record, measurement=replace(record.measurement, new_tokens=tokens, tokens_per_s=rate)
    )


def test_median_of_per_prompt_ratios():
    records = [
        _record("a", "p0", "target", 2.0),
        _record("a", "p0", "dynamic", 1.0),  # 2.0x
        _record("a", "p1", "target", 3.0),
        _record("a", "p1", "dynamic", 1.0),  # 3.0x
        _record("a", "p2", "target", 10.0),
        _record("a", "p2", "dynamic", 20.0),  # 0.5x
        _record("a", "p3", "target", 5.0),  # no dynamic record: left out
        _record("b", "p0", "target", 4.0),  # same id in another task: another prompt
        _record("b", "p0", "dynamic", 1.0),  # 4.0x
    ]
    assert per_prompt_ratios(records, "target", "dynamic") == {"a": [2.0, 3.0, 0.5], "b": [4.0]}
    medians = median_of_ratios(records, "target", "dynamic")
    # the median of ratios, not the ratio of the summed times (15 / 22 = 0.68x)
    assert medians == {"a": 2.0, "b": 4.0, "all": 2.5}
    assert median_of_ratios(records, "target", "oracle") == {}


def test_a_shorter_text_earns_no_speedup_from_its_length():
    """Speedups compare tokens per second: where the outputs are as long, the ratio of the
    wall times; a model of another precision that stops at an EOS after half the tokens in
    half the time is no faster."""
    target = _made("target", "p0", 8, 4.0).measurement
    for tokens, wall, expected in ((8, 2.0, 2.0), (4, 2.0, 1.0), (16, 4.0, 2.0)):
        measured = _made("w8a8", "p0", tokens, wall).measurement
        assert speedup(measured, target) == pytest.approx(expected)
    assert speedup(replace(target, wall_time_s=0.0), target) is None
    records = [
        _made("target", "p0", 8, 4.0),
        _made("w8a8", "p0", 4, 1.0),  # half the tokens in a quarter of the time: 2x, not 4x
        _made("target", "p1", 8, 6.0),
        _made("w8a8", "p1", 8, 2.0),  # as long: the ratio of the times, 3x
    ]
    assert aggregate.speedups(records, "w8a8") == {"a": 2.5, "all": 2.5}


def test_the_table_and_the_record_share_one_speedup():
    """A prompt where both stop at once (no new token) counts in the table with the ratio of
    the times, as its record's `speedup_vs_target` does; a method that made no token where
    the target made some is 0x, not credited for its time; one without a time is left out."""
    target, empty = _made("target", "p0", 0, 3.0), _made("w8a8", "p0", 0, 1.0)
    assert speedup(empty.measurement, target.measurement) == pytest.approx(3.0)
    assert aggregate.speedups([target, empty], "w8a8") == {"a": 3.0, "all": 3.0}
    wrote = _made("target", "p0", 8, 3.0)
    assert speedup(empty.measurement, wrote.measurement) == 0.0
    assert speedup(wrote.measurement, empty.measurement) is None
    assert aggregate.speedups([wrote, empty], "w8a8") == {"a": 0.0, "all": 0.0}
    assert aggregate.speedups([target, _made("w8a8", "p0", 0, 0.0)], "w8a8") == {}


def test_pooled_accepted_and_mismatch_counts():
    records = [
        _record("a", "p0", "dynamic", 1.0, accepted=[1, 2, 0]),
        _record("a", "p1", "dynamic", 1.0, accepted=[3], matches_target=False, kind="tie"),
        _record("a", "p1", "hf-dynamic", 1.0, matches_target=False, kind="BUG"),
    ]
    assert aggregate.pooled_accepted_per_round(records, "dynamic") == {"a": 1.5, "all": 1.5}
    counts = aggregate.mismatch_counts(records)
    assert report.format_mismatches(counts["a"]) == "2 (1 tie, 1 BUG)"


GOLDEN = Path(__file__).with_name("golden")
COMMITTED = sorted(
    [*GOLDEN.parent.parent.glob("benchmarks/**/results.jsonl"), *GOLDEN.glob("bench-*.jsonl")]
)


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_committed_records_load_and_write_back_the_same_json(path):
    """Typed records write the JSON the untyped ones did, older records included."""
    for line in path.read_text(encoding="utf-8").splitlines():
        record = BenchRecord.from_json(json.loads(line))
        assert json.dumps(record.to_json()) == line


@pytest.mark.parametrize(
    "name", ["self-draft-open-ended-2026-11-30", "qwen2.5-coder-fast-2026-11-30"]
)
def test_committed_run_renders_the_golden_tables(name):
    """The tables of a committed run, byte for byte as the untyped report rendered them
    (tests/golden: the records of benchmarks/NAME until 2026-12-07, and render_markdown of
    commit 141d887, no plots; since, speedups in tokens per
    second: llama.cpp's, whose text is not the target's, moved; since int4 left the bench's
    methods, llama.cpp's row lists before the int4 ones, methods it no longer knows)."""
    records = load_records(GOLDEN / f"bench-{name}.jsonl")
    expected = (GOLDEN / f"bench-{name}.md").read_text(encoding="utf-8")
    assert render_markdown(records) == expected


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2
    assert first_difference([], [7]) == 0


def test_dtype_step():
    assert dtype_step(17.125, torch.bfloat16) == 0.125
    assert dtype_step(14.0, torch.bfloat16) == 0.0625
    assert dtype_step(-3.0, torch.bfloat16) == 2**-6
    assert dtype_step(1.0, torch.float32) == 2**-23


def _logits(values: dict[int, float], size: int = 8) -> torch.Tensor:
    logits = torch.full((size,), -5.0)
    for token, value in values.items():
        logits[token] = value
    return logits


@pytest.mark.parametrize(
    ("values", "target_token", "method_token", "dtype", "kind"),
    [
        ({3: 17.125, 5: 17.125}, 3, 5, torch.bfloat16, "tie"),  # exact tie
        ({3: 14.0, 5: 13.9375}, 3, 5, torch.bfloat16, "tie"),  # one bf16 step
        ({3: 14.0, 5: 13.75}, 5, 3, torch.bfloat16, "tie"),  # four steps, either order
        ({3: 17.0, 5: 15.0}, 3, 5, torch.bfloat16, "BUG"),  # 16 steps
        ({3: 14.0, 5: 13.9375}, 3, 5, torch.float32, "BUG"),  # a tie in bf16, not in fp32
        ({3: 17.0, 5: 16.999}, 1, 5, torch.bfloat16, "BUG"),  # the target's token is far off
    ],
)
def test_classify_logits(values, target_token, method_token, dtype, kind):
    divergence = classify_logits(_logits(values), 4, target_token, method_token, dtype)
    assert divergence.kind == kind
    assert divergence.position == 4


def test_classify_logits_length_difference_is_a_bug():
    divergence = classify_logits(_logits({1: 1.0}), 2, 1, None, torch.bfloat16)
    assert divergence.kind == "BUG" and divergence.steps is None


def test_classify_mismatch_runs_one_forward_over_the_common_prefix():
    from dynaspec.models.tiny import tiny_pair

    target, _, _ = tiny_pair()
    prompt = torch.tensor([[10, 20, 30]])
    with torch.inference_mode():
        logits = target(input_ids=torch.tensor([[10, 20, 30, 40]])).logits[0, -1]
    best, worst = int(logits.argmax()), int(logits.argmin())
    reference, output = [40, best, 1], [40, worst, 1]
    divergence = classify_mismatch(target, prompt, reference, output)
    assert divergence.position == 1 and divergence.top_token == best
    assert divergence.target_gap == 0.0 and divergence.kind == "BUG"
    near = classify_mismatch(target, prompt, reference, output, tie_steps=float("inf"))
    assert near.kind == "tie"


def test_rounds_from_target_calls():
    # prompt of 10; round 0 verifies 5 drafts with the prompt and keeps 2 (+1); round 1
    # starts at the last committed token (position 12) with 4 drafts, keeps all 4 (+1);
    # round 2 drafts 1, final length 20 (0 accepted + 1)
    calls = [(15, 0), (5, 12), (2, 17)]
    assert rounds_from_target_calls(calls, 10, 19) == ([5, 4, 1], [2, 4, 0])
    assert rounds_from_target_calls([(15, None)], 10, 12) == ([], [])
    assert rounds_from_target_calls([(15, 0)], 10, 30) == ([], [])  # more kept than drafted


def test_hf_peer_does_not_leak_the_assistant_config():
    from dynaspec.models.tiny import tiny_pair

    target, draft, _ = tiny_pair()
    draft.generation_config.num_assistant_tokens = 11
    peer = HFPeer(target, draft)
    result = peer.generate(
        torch.tensor([[1, 2, 3]]),
        max_new_tokens=6,
        eos_token_id=None,
        pad_token_id=0,
        assist=HF_HEURISTIC,
    )
    assert result.sequences.shape[1] <= 9
    assert draft.generation_config.num_assistant_tokens == 11
    assert draft.generation_config.num_assistant_tokens_schedule != "heuristic"
    assert result.target_forwards == len(result.drafted_per_round) > 0


def test_transformers_tunes_its_dynamic_threshold_only_in_hf_dynamic(monkeypatch):
    """`hf-dynamic` is what a transformers user with scikit-learn gets (the threshold retuned
    by ROC over the confidences); `hf-dynamic-0.4` keeps 0.4 although scikit-learn is there."""
    metrics = pytest.importorskip("sklearn.metrics")
    from dynaspec.eval.hf_peer import HF_DYNAMIC, HF_DYNAMIC_FIXED
    from dynaspec.models.tiny import TinyPairConfig, tiny_pair

    curves = []
    roc_curve = metrics.roc_curve
    monkeypatch.setattr(
        metrics, "roc_curve", lambda *a, **k: curves.append(1) or roc_curve(*a, **k)
    )
    target, draft, _ = tiny_pair(TinyPairConfig(draft_noise=0.05))
    peer = HFPeer(target, draft)
    prompt = torch.tensor([list(b"def fib(n):")])
    kwargs = {"max_new_tokens": 48, "eos_token_id": None, "pad_token_id": 0}
    peer.generate(prompt, assist=HF_DYNAMIC_FIXED, **kwargs)
    assert not curves
    peer.generate(prompt, assist=HF_DYNAMIC, **kwargs)
    assert curves, "transformers never tuned: the draft was never both accepted and rejected"


def test_method_order_rotates_everything_but_keeps_the_oracle_after_the_baseline():
    methods = ("target", "dynamic", "oracle", "hf-dynamic")
    assert bench_methods.method_order(methods, 0) == ["target", "dynamic", "oracle", "hf-dynamic"]
    assert bench_methods.method_order(methods, 1) == ["dynamic", "hf-dynamic", "target", "oracle"]
    assert bench_methods.method_order(methods, 2) == ["hf-dynamic", "target", "oracle", "dynamic"]
    assert bench_methods.method_order(methods, 3) == ["hf-dynamic", "target", "dynamic", "oracle"]
    assert bench_methods.method_order(methods, 4) == bench_methods.method_order(methods, 0)
    firsts = {bench_methods.method_order(("target", "a", "b"), i)[0] for i in range(3)}
    assert firsts == {"target", "a", "b"}


def test_speedup_columns_come_from_the_method_table():
    assert [header for _, header in bench_methods.SPEEDUP_COLUMNS] == [
        "heuristic", "dynamic", "constant", "adaptive", "adaptive-warm", "oracle",
        "prompt lookup", "hybrid", "HF heuristic", "HF dynamic", "HF prompt lookup",
        "HF prompt lookup 32",
    ]  # fmt: skip
    assert all(callable(spec.run) for spec in bench_methods.METHOD_SPECS)


def test_a_method_is_one_spec_with_its_settings(monkeypatch):
    calls = []

    def fake_run(runner, call, **settings):
        calls.append((call.name, list(call.reference), settings))
        return MethodOutput(_record("t", "p", call.name, 1.0).measurement, (1, 2))

    spec = bench_methods.MethodSpec(
        "fake", "dynaspec", True, "a test method", fake_run, {"k": 3},
        bench_methods.Column("fake", 99), warmup_settings={"k": 1},
    )  # fmt: skip
    monkeypatch.setitem(bench_methods.SPECS, "fake", spec)
    ids = torch.tensor([[1, 2]])
    output = bench_methods.run_method(None, "fake", ids, [7])
    bench_methods.run_method(None, "fake", ids, [7], warmup=True)
    assert output.output_ids == (1, 2)
    assert calls == [("fake", [7], {"k": 3}), ("fake", [7], {"k": 1})]
    with pytest.raises(ConfigError, match="unknown method"):
        bench_methods.run_method(None, "turbo", ids, [])


def test_parse_methods():
    assert parse_methods("dynamic, hf-dynamic,dynamic") == ("dynamic", "hf-dynamic")
    with pytest.raises(ConfigError, match="unknown method"):
        parse_methods("dynamic,turbo")
    with pytest.raises(ConfigError, match="empty"):
        parse_methods(" , ")


def test_command_line():
    assert provenance.command_line(["/usr/bin/dynaspec", "bench", "--smoke"]) == (
        "dynaspec bench --smoke"
    )
    assert provenance.command_line([bench.__file__, "--n", "2"]) == (
        "python -m dynaspec.eval.bench.run --n 2"
    )
    main = Path(dynaspec.__file__).with_name("__main__.py")
    assert provenance.command_line([str(main), "oracle"]) == "python -m dynaspec oracle"
    assert provenance.command_line(["/x/pytest", "-q"]) is None
    args = _parse(["--smoke", "--n", "3", "--methods", "dynamic,oracle", "--out", "a b"])
    assert bench_args.equivalent_command(args) == (
        "dynaspec bench --smoke --n 3 --methods dynamic,oracle --out 'a b'"
    )


def test_another_engines_divergence_is_a_peer_not_a_bug_of_dynaspecs():
    from dynaspec.eval.bench.aggregate import mismatch_counts
    from dynaspec.eval.bench.report import _mismatch_line
    from dynaspec.eval.bench.tables import format_mismatches

    ours = _record("code", "p", "hybrid", 1.0, matches_target=False)
    peer = _record("code", "p", "openvino-spec", 1.0, matches_target=False)
    peer = replace(peer, measurement=replace(peer.measurement, family="openvino"))
    tie = _record("code", "p", "adaptive", 1.0, matches_target=False, kind="tie")
    counts = mismatch_counts([ours, peer, tie])["code"]
    assert format_mismatches(counts) == "3 (1 tie, 1 BUG, 1 peer)"
    assert _mismatch_line(peer).startswith("- **peer** openvino-spec")
    assert _mismatch_line(ours).startswith("- **BUG** hybrid")


def _runs(*runs):
    """`Measured` runs from (output ids, wall time) pairs."""
    return [
        bench_record.Measured(
            MethodOutput(_record("t", "p", "m", wall).measurement, tuple(ids)), 0, None
        )
        for ids, wall in runs
    ]


def test_a_repeated_method_keeps_its_median_run_and_every_runs_output_is_checked(monkeypatch):
    divergence = Divergence(2, 3, 4, 1, 1.0, 0.0, 0.0, 0.1, 0.0, "bfloat16", "tie")
    checked = []

    def classify(target, input_ids, reference, output, tie_steps, dtype):
        checked.append(list(output))
        return divergence

    monkeypatch.setattr(bench_record, "classify_mismatch", classify)
    monkeypatch.setattr(bench_record, "model_dtype", lambda target: torch.bfloat16)
    prompt = bench.BenchPrompt("t", "p", torch.tensor([[1, 2]]))
    runs = {
        "target": _runs(([1, 2, 3], 4.0), ([1, 2, 3], 6.0), ([1, 2, 3], 5.0)),
        "adaptive": _runs(([1, 2, 3], 1.0), ([1, 2, 4], 3.0), ([1, 2, 3], 2.0)),
    }
    config = bench.BenchConfig(repeat=3)
    record = bench_record.prompt_record(None, prompt, 0, "adaptive", runs, config)
    assert record.measurement.wall_time_s == 2.0  # the median run, not the fastest
    assert record.wall_times_s == (1.0, 3.0, 2.0)
    assert record.speedup_vs_target == pytest.approx(5.0 / 2.0)  # median over median
    # the median run agrees, another run parted: the record says so
    assert checked == [[1, 2, 4]] and record.mismatch == divergence
    assert record.matches_target is False and record.same_as_target is True
    assert record.to_json()["wall_times_s"] == [1.0, 3.0, 2.0]
    assert BenchRecord.from_json(record.to_json()).wall_times_s == (1.0, 3.0, 2.0)
    alone = bench_record.prompt_record(None, prompt, 0, "target", runs, config)
    assert alone.matches_target and alone.mismatch is None
    # one run each: no list, as before
    single = {name: found[:1] for name, found in runs.items()}
    record = bench_record.prompt_record(
        None, prompt, 0, "adaptive", single, replace(config, repeat=1)
    )
    assert record.wall_times_s is None and "wall_times_s" not in record.to_json()
    assert (
        bench_record.median_run(_runs(([1], 2.0), ([1], 1.0))).output.measurement.wall_time_s == 1.0
    )


def test_repeat_runs_every_method_that_many_times_per_prompt(tmp_path, monkeypatch):
    calls = Counter()
    run_method = bench.run_method

    def counted(runner, name, input_ids, reference, **kwargs):
        calls[name] += 1
        return run_method(runner, name, input_ids, reference, **kwargs)

    monkeypatch.setattr(bench, "run_method", counted)
    argv = ["--smoke", "--max-new-tokens", "4", "--no-progress", "--no-warmup"]
    argv += ["--methods", "target,adaptive", "--repeat", "3", "--out", str(tmp_path)]
    assert bench.run_bench(_parse(argv)) == 0
    records = load_records(tmp_path / "results.jsonl")
    prompts = len(bench.SMOKE_PROMPTS) * bench_args.SMOKE_N
    assert calls == {"target": 3 * prompts, "adaptive": 3 * prompts}
    assert len(records) == 2 * prompts
    for record in records:
        assert len(record.wall_times_s) == 3
        assert record.measurement.wall_time_s == sorted(record.wall_times_s)[1]


def test_repeat_is_refused_with_batch():
    args = _parse(["--smoke", "--batch", "1,2", "--repeat", "2"])
    with pytest.raises(ConfigError, match="drop --repeat"):
        bench.run_bench(args)
