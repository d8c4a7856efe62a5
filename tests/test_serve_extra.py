"""The CLI works without the `serve` extra (FastAPI, uvicorn, prometheus_client) and the
openai package: `generate` and `--help` never import them, and `serve`/`loadtest` say what
to install instead of a traceback. (The README's first command installs dynaspec alone.)"""

from __future__ import annotations

import subprocess
import sys

BLOCK = (
    "import sys\n"
    "for name in ('openai', 'fastapi', 'uvicorn', 'prometheus_client', 'starlette'):\n"
    "    sys.modules[name] = None\n"
    "from dynaspec.cli import main\n"
)


def run(argv: list[str]) -> subprocess.CompletedProcess:
    code = BLOCK + f"sys.exit(main({argv!r}))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_generate_runs_without_the_serve_extra() -> None:
    done = run(["generate", "--pair", "tiny", "--max-new-tokens", "4", "def f(x):"])
    assert done.returncode == 0, done.stderr
    assert run(["serve", "--help"]).returncode == 0


def test_serve_and_loadtest_name_what_to_install() -> None:
    for argv in (["serve", "--pair", "tiny"], ["loadtest", "--smoke"]):
        done = run(argv)
        assert done.returncode == 1, done.stderr
        assert 'pip install -e ".[serve]"' in done.stderr and "Traceback" not in done.stderr
