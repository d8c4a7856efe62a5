"""--device on generate, serve, bench and loadtest: a device the machine lacks is one line
naming the fix and exit 2, before any model loads; the flag reaches the loaders; CPU-only
fast-path flags are refused with a GPU. The loaders are replaced by recorders, and CUDA is
faked where a test needs the machine to have it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from loader_helpers import STOP, LoadRecorder, fake_one_cuda_gpu, record_loaders

from dynaspec import cli
from dynaspec.errors import CpuOnlyOptionError, DeviceNotAvailableError
from dynaspec.models import loading
from dynaspec.models.devices import check_cpu_only_options, resolve_device

COMMANDS = {
    "generate": ["generate", "hello"],
    "serve": ["serve"],
    "bench": ["bench", "--smoke"],
    "loadtest": ["loadtest", "--smoke"],
}


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LoadRecorder:
    return record_loaders(monkeypatch, tmp_path)


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_one_cuda_gpu(monkeypatch)


needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@needs_no_gpu
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_cuda_without_a_gpu_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, command: str
) -> None:
    assert cli.main([*COMMANDS[command], "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "--device cuda" in err[0] and "pass --device cpu" in err[0], err[0]
    assert recorder.calls == []  # nothing loaded


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_device_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, command: str
) -> None:
    assert cli.main([*COMMANDS[command], "--device", "gpu"]) == 2
    assert "unknown device 'gpu': use cpu, cuda or cuda:N" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_names_the_device_flag(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert cli.main([command, "--help"]) == 0
    assert "--device" in capsys.readouterr().out


def test_a_missing_gpu_index_names_the_ones_there(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, fake_cuda: None
) -> None:
    assert cli.main(["generate", "hello", "--device", "cuda:3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--device cuda:0 to cuda:0" in err[0], err


@pytest.mark.parametrize("name", ["cpu", "cuda", "cuda:0"])
def test_generate_passes_the_device_to_load_pair(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, fake_cuda: None, name: str
) -> None:
    # --draft-quantize none: the CPU's automatic 4-bit draft would build its kernel first
    assert cli.main(["generate", "hello", "--device", name, "--draft-quantize", "none"]) == 1
    assert STOP in capsys.readouterr().err
    assert [call["device"] for call in recorder.calls] == [name]


def test_generate_on_cuda_loads_bf16_and_says_where(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, fake_cuda: None
) -> None:
    """The dtype follows the device (a GPU computes bf16), whatever this CPU has."""
    assert cli.main(["generate", "hello", "--device", "cuda"]) == 1
    captured = capsys.readouterr()
    out = captured.out
    assert "device cuda" in out and "dtype bfloat16 (machine: a GPU computes bf16" in out
    assert "--fast auto chose the models as loaded for a CUDA GPU" in captured.err
    assert recorder.calls[0]["fast"] == "auto" and recorder.calls[0]["device"] == "cuda"


@pytest.mark.parametrize("command", ["serve", "loadtest"])
def test_serve_and_loadtest_pass_the_device_to_the_loader(
    recorder: LoadRecorder, fake_cuda: None, command: str
) -> None:
    argv = [command, "--device", "cuda", "--draft-quantize", "none"]
    assert cli.main(argv) == 1
    assert [call["device"] for call in recorder.calls] == ["cuda"]


def test_bench_passes_the_device_to_the_loader(
    recorder: LoadRecorder, fake_cuda: None, tmp_path: Path
) -> None:
    assert cli.main(["bench", "--smoke", "--device", "cuda:0", "--out", str(tmp_path)]) == 1
    assert [call["device"] for call in recorder.calls] == ["cuda:0"]


@pytest.mark.parametrize(
    "flags",
    [
        ["--quantize", "int8"],
        ["--draft-quantize", "w4a8"],
        ["--draft-engine", "llamacpp"],
    ],
)
def test_cpu_only_flags_with_a_gpu_are_refused(
    capsys: pytest.CaptureFixture[str], recorder: LoadRecorder, fake_cuda: None, flags: list[str]
) -> None:
    assert cli.main(["generate", "hello", "--device", "cuda", *flags]) == 2
    err = capsys.readouterr().err
    assert f"{' '.join(flags)} run on CPU kernels only" in err and "--device cpu" in err
    assert recorder.calls == []


def test_the_library_types_its_device_errors() -> None:
    with pytest.raises(CpuOnlyOptionError, match="quantize='int8'.*device='cpu'"):
        check_cpu_only_options("cuda", quantize="int8")
    check_cpu_only_options("cpu", quantize="int8", draft_engine="llamacpp")  # fine on a CPU
    check_cpu_only_options("cuda")  # nothing CPU-only asked
    if not torch.cuda.is_available():
        with pytest.raises(DeviceNotAvailableError, match="pass device='cpu'"):
            resolve_device("cuda")
        with pytest.raises(DeviceNotAvailableError):
            loading.load_pair(device="cuda")


def test_load_model_set_refuses_cpu_kernels_on_a_gpu_before_loading(
    recorder: LoadRecorder, fake_cuda: None
) -> None:
    with pytest.raises(CpuOnlyOptionError):
        loading.load_model_set(device="cuda", static=True, quantize="w8a8")
    assert recorder.calls == []


def test_the_tiny_pair_loads_on_the_cpu_device() -> None:
    models = loading.load_model_set("tiny", device="cpu")
    assert next(models.target.parameters()).device.type == "cpu"
    assert next(models.draft.parameters()).device.type == "cpu"
