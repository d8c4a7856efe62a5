"""Command-line inputs checked before any model loads, in the CLI's words (issue 24, items
4, 5 and 7): text that is not UTF-8, prompt-lookup flags out of range or without prompt
lookup (exit 2), and sampling flags that do nothing in greedy mode (one warning each)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from test_cli_errors import no_model_loads_unless_allowed, usage_error  # noqa: F401

from dynaspec import cli

pytestmark = pytest.mark.usefixtures("keep_thread_count")


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["generate", "caf\udce9"], "the prompt: holds bytes that are not UTF-8 text (byte 0xe9)"),
        (["generate", "--prompt", "\udcff"], "the prompt: holds bytes that are not UTF-8"),
        (["generate", "--stop", "x\udc80", "hi"], "argument --stop: holds bytes that are not"),
    ],
)
def test_text_that_is_not_utf8_is_a_usage_error(capsys, argv: list[str], expected: str) -> None:
    line = usage_error(capsys, *argv)
    assert expected in line and "iconv" in line


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["--prompt-lookup", "-3"], "argument --prompt-lookup: must be >= 1, got -3; drop"),
        (["--prompt-lookup", "0"], "argument --prompt-lookup: must be >= 1, got 0"),
        (
            ["--prompt-lookup", "5", "--max-matching-ngram-size", "0"],
            "argument --max-matching-ngram-size: must be >= 1, got 0",
        ),
        (
            ["--max-matching-ngram-size", "3"],
            "argument --max-matching-ngram-size: only acts with prompt lookup: add "
            "--prompt-lookup N",
        ),
    ],
)
def test_prompt_lookup_flags_are_checked_before_loading(
    capsys, argv: list[str], expected: str
) -> None:
    line = usage_error(capsys, "generate", *argv, "hi")
    assert expected in line
    assert "prompt_lookup_num_tokens" not in line


def checked(*argv: str) -> None:
    args = cli.build_parser().parse_args(["generate", *argv])
    args.check(args)


def test_sampling_flags_without_sample_warn_once_each(capsys) -> None:
    checked("--temperature", "0.5", "--seed", "3", "hi")
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "warning: --temperature only acts when sampling: add --sample (unless the model's "
        "generation config samples), or drop it",
        "warning: --seed only acts when sampling: add --sample (unless the model's "
        "generation config samples), or drop it",
    ]
    checked("--sample", "--temperature", "0.5", "--seed", "3", "hi")
    checked("hi")
    assert capsys.readouterr().err == ""


def test_interrupt_while_importing_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    from dynaspec import __main__ as entry

    def interrupted(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(entry.importlib, "import_module", interrupted)
    assert entry.main() == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_entry_point_imports_neither_torch_nor_transformers() -> None:
    """Ctrl-C in the first seconds lands inside main(), which reports it in one line: the
    package and its entry module import nothing heavy before main() runs."""
    code = (
        "import sys, dynaspec.__main__ as entry; "
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "assert not heavy, heavy; print(callable(entry.main))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
