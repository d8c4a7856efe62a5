"""`dynaspec devicecheck`: the real shapes, the overhead arithmetic, one tiny pair end to end,
the time budget, and the outputs (the whole --dry-run is a CI smoke run)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from dynaspec.backends.hf import HFAdapter
from dynaspec.eval.batch_projection import batch_rows, expected_tokens
from dynaspec.eval.devicecheck import compiled, graphs
from dynaspec.eval.devicecheck import run as devicecheck
from dynaspec.eval.devicecheck.overhead import RunTiming, overhead
from dynaspec.eval.devicecheck.shapes import DRY_RUN_PAIRS, GPU_PAIRS
from dynaspec.eval.projection import read_pair_costs

# Parameter counts of the published checkpoints (embedding and tied output counted once).
PUBLISHED_PARAMETERS = {
    "Qwen2.5-0.5B": 494_032_768,
    "Qwen2.5-1.5B": 1_543_714_304,
    "Qwen2.5-7B": 7_615_616_512,
    "Llama-3.2-1B": 1_235_814_400,
    "Llama-3.1-8B": 8_030_261_248,
    "OPT-125M": 125_239_296,
    "OPT-6.7B": 6_658_473_984,
}


def test_real_shapes_have_the_published_parameter_counts() -> None:
    from transformers import AutoModelForCausalLM

    shapes = {shape.name: shape for pair in GPU_PAIRS for shape in (pair.target, pair.draft)}
    assert set(shapes) == set(PUBLISHED_PARAMETERS)
    for name, shape in shapes.items():
        with torch.device("meta"):  # no memory, no initialisation
            model = AutoModelForCausalLM.from_config(shape.config())
        count = sum(param.numel() for param in model.parameters())
        assert count == PUBLISHED_PARAMETERS[name], name


def _timing(rounds: int, setup: float, per_round: float, forward: float) -> RunTiming:
    other = setup + per_round * rounds
    return RunTiming(other + forward * rounds, forward * rounds, rounds, 4 * rounds, 5, 4, 4)


def test_overhead_is_the_slope_per_round_and_setup_the_intercept() -> None:
    calls = []

    def run(new_tokens: int, hooked: bool) -> RunTiming:
        calls.append((new_tokens, hooked))
        return _timing(new_tokens // 5, setup=0.010, per_round=0.002, forward=0.050)

    result = overhead(run, short_tokens=10, long_tokens=40, reps=2)
    assert result.per_round_s == pytest.approx(0.002)
    assert result.setup_s == pytest.approx(0.010)
    assert result.forward_per_round_s == pytest.approx(0.050)
    assert result.acceptance == 1.0
    # warm-up, then (short, long) hooked per repetition, then one long call unhooked
    assert calls == [(10, False), (10, True), (40, True), (10, True), (40, True), (40, False)]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    devicecheck.add_devicecheck_arguments(parser)
    return parser.parse_args(argv)


def _small_settings(budget_s: float = 600.0) -> devicecheck.CheckSettings:
    return devicecheck.CheckSettings(
        device="cpu",
        dtype="bfloat16",
        prefix_tokens=12,
        max_verify_tokens=5,
        cost_reps=1,
        lookahead=2,
        short_rounds=1,
        long_rounds=2,
        overhead_reps=1,
        budget_s=budget_s,
        tests_timeout_s=1.0,
    )


def test_one_tiny_pair_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    pair = next(p for p in DRY_RUN_PAIRS if "opt" in p.name)  # OPT: learned positions, biases
    record = devicecheck.check_pair(pair, _small_settings(), devicecheck.Progress(600.0))
    eager = record["variants"]["eager"]
    costs, results = eager["costs"], eager["overhead"]
    assert len(costs["verify_s"]) == 5 and min(costs["verify_s"]) > 0
    assert costs["draft_token_s"] > 0 and costs["target_prefill_token_s"] > 0
    for method in ("dynaspec", "transformers"):  # the target drafting for itself: all
        assert results[method]["acceptance"] > 0.5  # accepted, but for bf16 ties
        assert results[method]["rounds_per_call"] >= 2
    for method in ("dynaspec_target_alone", "transformers_target_alone"):
        assert results[method]["acceptance"] is None
        assert results[method]["rounds_per_call"] == 6  # one round per token
    assert "T(1..5)" in capsys.readouterr().out


def test_spent_budget_skips_the_pairs_and_still_writes(tmp_path: Path) -> None:
    args = _args("--out", str(tmp_path), "--budget-s", "1e-6", "--dry-run", "--skip-tests")
    assert devicecheck.run_devicecheck(args) == 0
    record = json.loads((tmp_path / devicecheck.JSON_NAME).read_text())
    assert not any({"graphs", "eager"} & set(pair["variants"]) for pair in record["pairs"])
    assert len(record["skipped"]) == 2 * len(DRY_RUN_PAIRS)  # graphs and eager, each pair
    assert record["tests"]["outcome"] == "not run"
    markdown = (tmp_path / devicecheck.MARKDOWN_NAME).read_text()
    assert "## Skipped" in markdown and "time budget" in markdown


def test_compiled_variant_is_skipped_with_a_reason_until_the_fast_path_exists() -> None:
    factory, reason = compiled.compiled_factory()
    assert (factory is None) == (reason is not None)
    if factory is None:
        assert "dynaspec.backends.static" in reason
        pair = DRY_RUN_PAIRS[0]
        prompt = torch.zeros(1, 4, dtype=torch.long)
        skipped = compiled.compiled_variant(pair, prompt, _small_settings(), None)
        assert skipped == {"skipped": reason}


def test_compiled_phase_measures_the_first_pair_through_the_factory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a stand-in for the compiled adapter (the eager one), the phase's code runs."""
    monkeypatch.setattr(compiled, "compiled_factory", lambda: (HFAdapter, None))
    pairs = DRY_RUN_PAIRS[:2]
    record = {"pairs": [{"name": p.name, "variants": {"eager": {"costs": {}}}} for p in pairs]}
    devicecheck._compiled_phase(record, pairs, _small_settings(), devicecheck.Progress(600.0))
    first, second = (pair["variants"]["compiled"] for pair in record["pairs"])
    assert len(first["costs"]["verify_s"]) == 5 and first["compile_s"] >= 0
    assert second == {"skipped": f"compiled on {pairs[0].name} only"}


def test_a_failing_pair_is_recorded_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(pair, settings, progress, entry):  # noqa: ANN001, ANN202
        raise RuntimeError(f"CUDA out of memory building {pair.name}")

    monkeypatch.setattr(devicecheck, "check_pair", broken)
    args = _args("--out", str(tmp_path), "--dry-run", "--skip-tests", "--skip-graphs")
    assert devicecheck.run_devicecheck(args) == 0
    record = json.loads((tmp_path / devicecheck.JSON_NAME).read_text())
    assert [pair["name"] for pair in record["pairs"]] == [p.name for p in DRY_RUN_PAIRS]
    assert all("out of memory" in pair["variants"]["eager"]["error"] for pair in record["pairs"])
    assert "FAILED: RuntimeError" in (tmp_path / devicecheck.MARKDOWN_NAME).read_text()


def test_graph_variant_of_a_tiny_pair_runs_on_cpu_through_the_seam(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(graphs, "BATCH_SIZES", (1, 4))
    monkeypatch.setattr(graphs, "RUN_SIZES", (1, 2))
    pair = next(p for p in DRY_RUN_PAIRS if "qwen2.5-1.5b" in p.name)
    prompt = torch.randint(0, 500, (1, 12), generator=torch.Generator().manual_seed(0))
    result = graphs.graph_variant(pair, prompt, _small_settings(), devicecheck.Progress(600.0))
    assert not result["graphs_enabled"] and result["captured_graphs"] == 0  # CPU: no capture
    assert result["buckets"] == [1, 2, 4]  # those within T(1..5)
    verify_s = result["costs"]["verify_s"]
    assert len(verify_s) == 5 and result["bucket_s"]["4"] == verify_s[3]
    for method in ("dynaspec", "dynaspec_target_alone"):
        assert result["overhead"][method]["per_round_s"] >= 0
    batch = result["batch"]
    assert batch["sizes"] == [1, 4] and batch["widths"] == list(graphs.BATCH_WIDTHS)
    assert all(t > 0 for row in batch["verify_s"].values() for t in row.values())
    assert set(batch["runs"]) == {"1", "2"}
    for run in batch["runs"].values():
        ratio = run["adaptive_tok_s"] / run["alone_tok_s"]
        assert run["adaptive_over_alone"] == pytest.approx(ratio) and ratio > 0


def test_graph_variant_skips_a_pair_without_a_static_path() -> None:
    pair = next(p for p in DRY_RUN_PAIRS if "opt" in p.name)
    result = graphs.graph_variant(pair, torch.zeros(1, 4, dtype=torch.long), None, None)
    assert "no static path" in result["skipped"] and "OPT" in result["skipped"]


def _batch(verify: dict[int, dict[int, float]], draft_s: float) -> dict:
    return {
        "sizes": sorted(verify),
        "widths": sorted(next(iter(verify.values()))),
        "verify_s": {str(b): {str(n): t for n, t in row.items()} for b, row in verify.items()},
        "draft_step_s": {str(b): draft_s for b in verify},
    }


def test_batch_projection_speculates_only_where_it_pays() -> None:
    assert expected_tokens(0.5, 2) == 1.75 and expected_tokens(0.0, 7) == 1.0
    # batch 1: verification nearly free; batch 32: a token more per row costs a step more
    batch = _batch(
        {1: {1: 1.0, 2: 1.0, 4: 1.05, 8: 1.1}, 32: {1: 2.0, 2: 4.0, 4: 8.0, 8: 16.0}}, 0.1
    )
    small, large = batch_rows("pair", batch, acceptance=0.8)
    assert small["best_k"] == 7 and small["adaptive_over_alone"] > 2  # 4.16 tokens in 1.8 s
    assert small["alone_tok_s"] == 1.0
    assert large["speculative_tok_s"] < large["alone_tok_s"] == 16.0
    assert large["adaptive_tok_s"] == large["alone_tok_s"]  # it stands aside
    nothing = batch_rows("pair", batch, acceptance=0.0)
    assert all(row["adaptive_over_alone"] == 1.0 for row in nothing)


def test_projection_reads_the_graph_variants_buckets_and_batches(tmp_path: Path) -> None:
    costs = {"draft_token_s": 0.1, "verify_s": [1.0, 1.0, 1.0, 1.0, 1.2]}
    batch = _batch({1: {1: 1.0, 2: 1.0}}, 0.1)
    graphs_variant = {"costs": costs, "buckets": [1, 2, 4], "batch": batch}
    pair = {"name": "p", "variants": {"graphs": graphs_variant, "eager": {"costs": costs}}}
    path = tmp_path / "devicecheck.json"
    path.write_text(json.dumps({"pairs": [pair]}))
    (graphed,) = read_pair_costs(path, "graphs")
    assert graphed.buckets == (1, 2, 4) and graphed.batch == batch
    (eager,) = read_pair_costs(path, "eager")
    assert eager.buckets == () and eager.batch is None
