"""CUDA graphs as an option (issue 63): `cuda_graphs=` of the loaders and --cuda-graphs /
--no-cuda-graphs of generate, serve, loadtest and bench. The static path on a CUDA GPU
replays graphs by default; the CPU path never crosses the seam (backends/graphs.py); asked
for on the CPU, the option is a typed error naming the fix. The loaders are replaced by
recorders and CUDA is faked where a test needs the machine to have it; the capture itself
through the loaders runs on a GPU (marked cuda)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from loader_helpers import LoadRecorder, fake_one_cuda_gpu, record_loaders
from tiny_models import CUDA

import dynaspec
from dynaspec import cli
from dynaspec.errors import ConfigError, CudaOnlyOptionError, ModelNotAvailableError
from dynaspec.eval import provenance
from dynaspec.eval.bench import run as bench_run
from dynaspec.eval.bench.args import add_bench_arguments
from dynaspec.models import loading
from dynaspec.models.devices import use_cuda_graphs

CPU_ERROR = "--cuda-graphs captures forwards as CUDA graphs, on a CUDA GPU only"


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LoadRecorder:
    return record_loaders(monkeypatch, tmp_path, "_tiny_models")


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_one_cuda_gpu(monkeypatch)


# ---- the rule ----------------------------------------------------------------------------


def test_graphs_are_on_by_default_only_for_the_static_path_on_cuda() -> None:
    assert use_cuda_graphs("cuda", None, static=True)
    assert use_cuda_graphs("cuda:1", None, static=True)
    assert not use_cuda_graphs("cuda", None, static=False)  # transformers' forward
    assert not use_cuda_graphs("cuda", None, static=True, compile=True)  # the other way
    assert not use_cuda_graphs("cuda", False, static=True)  # --no-cuda-graphs
    for device in (None, "cpu", torch.device("cpu")):
        assert not use_cuda_graphs(device, None, static=True)  # the CPU never captures
        assert not use_cuda_graphs(device, False, static=True)


def test_graphs_asked_for_off_cuda_are_a_typed_error_naming_the_fix() -> None:
    for device in (None, "cpu"):
        with pytest.raises(CudaOnlyOptionError, match="drop cuda_graphs=True, or pass dev"):
            use_cuda_graphs(device, True, static=True)
    try:
        use_cuda_graphs("cpu", True, static=False)
    except CudaOnlyOptionError as error:
        assert error.for_cli().startswith(CPU_ERROR) and "pass --device cuda" in error.for_cli()
    assert isinstance(CudaOnlyOptionError("x"), ConfigError)  # caught as a ConfigError too
    with pytest.raises(ConfigError, match="two ways to one end"):
        use_cuda_graphs("cuda", True, static=True, compile=True)
    assert use_cuda_graphs("cuda", True, static=False)  # --cuda-graphs alone: static path


# ---- the loaders -------------------------------------------------------------------------


def test_the_option_reaches_both_adapters_on_cuda(recorder: LoadRecorder, fake_cuda: None) -> None:
    """load_model_set's tiny pair: what make_fast gets for the target and the draft."""
    for asked, static, expected in [
        (None, True, True),
        (False, True, False),
        (True, False, True),
        (None, False, False),
    ]:
        with pytest.raises(ModelNotAvailableError):
            loading.load_model_set("tiny", device="cuda", static=static, cuda_graphs=asked)
        target_options, draft_options = recorder.calls[-1]["args"][3:5]
        assert target_options["graphs"] is expected and draft_options["graphs"] is expected


def test_the_loaders_refuse_graphs_on_the_cpu_before_loading() -> None:
    for load in (loading.load_pair, loading.load_model_set):
        with pytest.raises(CudaOnlyOptionError, match="pass device='cuda'"):
            load(device="cpu", static=True, cuda_graphs=True)
    with pytest.raises(CudaOnlyOptionError):
        loading.load_model("tiny-target-that-is-never-read", cuda_graphs=True)
    with pytest.raises(ConfigError, match="cuda_graphs=True were given too"):
        loading.load_pair(fast="auto", cuda_graphs=True)


def test_the_cpu_path_never_crosses_the_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tiny pair on the static path of the CPU: no graphs asked for, none enabled, and a
    generate call never reaches torch.cuda's graph machinery."""
    models = loading.load_model_set("tiny", device="cpu", static=True)
    for model in (models.target, models.draft):
        assert not model.fast.cuda_graphs and not model._graphs.enabled

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the CPU path reached torch.cuda's graphs")

    monkeypatch.setattr(torch.cuda, "CUDAGraph", refuse)
    monkeypatch.setattr(torch.cuda, "graph", refuse)
    prompt = torch.tensor([[1, 2, 3, 4, 5]])
    out = dynaspec.generate(models.target, models.draft, prompt, max_new_tokens=12)
    assert out.sequences.shape[1] > prompt.shape[1]


# ---- the command line --------------------------------------------------------------------

COMMANDS = {
    "generate": ["generate", "hello", "--draft-quantize", "none"],
    "serve": ["serve", "--draft-quantize", "none"],
    "loadtest": ["loadtest", "--draft-quantize", "none"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_static_on_cuda_leaves_the_default_to_the_loader(
    recorder: LoadRecorder, fake_cuda: None, command: str
) -> None:
    assert cli.main([*COMMANDS[command], "--device", "cuda", "--static"]) == 1
    assert recorder.calls[-1]["static"] is True and recorder.calls[-1]["cuda_graphs"] is None
    assert cli.main([*COMMANDS[command], "--device", "cuda", "--static", "--no-cuda-graphs"]) == 1
    assert recorder.calls[-1]["cuda_graphs"] is False


def test_generate_says_the_graphs_in_its_first_line(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, fake_cuda: None
) -> None:
    assert cli.main([*COMMANDS["generate"], "--device", "cuda", "--static"]) == 1
    assert "fast path: target static KV cache + CUDA graphs" in capsys.readouterr().out
    argv = [*COMMANDS["generate"], "--device", "cuda", "--static", "--no-cuda-graphs"]
    assert cli.main(argv) == 1
    assert "CUDA graphs" not in capsys.readouterr().out
    assert cli.main([*COMMANDS["generate"], "--static"]) == 1  # the CPU
    assert "CUDA graphs" not in capsys.readouterr().out


@pytest.mark.parametrize("command", [*sorted(COMMANDS), "bench"])
def test_cuda_graphs_on_the_cpu_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, command: str
) -> None:
    argv = ["bench", "--smoke"] if command == "bench" else COMMANDS[command]
    assert cli.main([*argv, "--device", "cpu", "--cuda-graphs"]) == 2
    err = capsys.readouterr().err
    assert CPU_ERROR in err and "drop --cuda-graphs, or pass --device cuda" in err, err
    assert recorder.calls == []


def test_cuda_graphs_beside_compile_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, fake_cuda: None
) -> None:
    argv = ["generate", "hello", "--device", "cuda", "--compile", "--cuda-graphs"]
    assert cli.main(argv) == 2
    assert "--cuda-graphs and --compile are two ways to one end" in capsys.readouterr().err


def test_bench_fast_methods_take_graphs_on_cuda(fake_cuda: None) -> None:
    def args(*flags: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        add_bench_arguments(parser)
        return parser.parse_args(list(flags))

    assert bench_run._graphs(args("--device", "cuda"))
    assert not bench_run._graphs(args("--device", "cuda", "--no-cuda-graphs"))
    assert not bench_run._graphs(args("--device", "cuda", "--fast-compile"))
    assert not bench_run._graphs(args("--device", "cpu"))
    command = provenance.equivalent_command("bench", add_bench_arguments, args("--no-cuda-graphs"))
    assert command.endswith("--no-cuda-graphs")


# ---- on a GPU: the loaders' adapters capture -----------------------------------------------


@CUDA[0]
@CUDA[1]
def test_the_static_tiny_pair_on_cuda_replays_graphs_with_the_same_output() -> None:
    graphed = loading.load_model_set("tiny", device="cuda", static=True)
    plain = loading.load_model_set("tiny", device="cuda", static=True, cuda_graphs=False)
    assert graphed.target._graphs.enabled and graphed.draft._graphs.enabled
    assert not plain.target._graphs.enabled
    prompt = torch.tensor([[1, 2, 3, 4, 5]], device="cuda")
    ours = dynaspec.generate(graphed.target, graphed.draft, prompt, max_new_tokens=16)
    theirs = dynaspec.generate(plain.target, plain.draft, prompt, max_new_tokens=16)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert graphed.target._graphs.capture_count > 0
