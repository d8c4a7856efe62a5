"""Help texts state what the code does, not figures that go stale: no memory sizes, speedups,
rates or percentages in any subcommand's --help (those live in docs/results.md, generated
from the records), and each one says --quantize is the flag that changes the output."""

from __future__ import annotations

import re

import pytest

from dynaspec import cli

COMMANDS = ("generate", "serve", "loadtest", "bench", "oracle", "models", "devicecheck")
FIGURE = re.compile(r"\d+(\.\d+)? ?(GB|MB|GiB|MiB|tok/s|x\b|%)")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_states_no_measured_figures(capsys: pytest.CaptureFixture[str], command: str) -> None:
    assert cli.main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert not FIGURE.search(text), FIGURE.search(text)


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_quantize_says_it_changes_the_output(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    assert cli.main([command, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "CHANGES THE OUTPUT (the one flag that does)" in text
    assert "--fast {auto,off}" in text
