"""Step 1 of the device check: the test suites marked `cuda`, in a subprocess.

`pytest -m cuda` selects the equality, sampling, device-placement and processor tests that
run on the GPU; the outcome (exit status, pytest's summary line, the output) is recorded
whatever it is. Without a GPU every selected test is skipped, never faked.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from time import perf_counter
from typing import Any

CUDA_TEST_FILES = (
    "test_equality.py",
    "test_sampling.py",
    "test_devices.py",
    "test_processors.py",
    "test_graphs.py",
    "test_graphs_batch.py",
    "test_graphs_options.py",
)
_SUMMARY = re.compile(r"\d+ (passed|failed|skipped|error|errors|deselected)\b")


def tests_folder() -> Path | None:
    """The repository's tests/ folder next to this source tree (an editable install)."""
    folder = Path(__file__).resolve().parents[4] / "tests"  # src/dynaspec/eval/devicecheck/
    return folder if folder.is_dir() else None


def run_cuda_tests(timeout_s: float, output_file: Path) -> dict[str, Any]:
    """Runs `pytest -m cuda` on CUDA_TEST_FILES; writes the whole output to `output_file`."""
    folder = tests_folder()
    if folder is None:
        return {"outcome": "not run", "reason": "no tests/ folder: install with pip -e ."}
    files = [str(folder / name) for name in CUDA_TEST_FILES if (folder / name).is_file()]
    command = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rs", "-p", "no:cacheprovider"]
    command += files
    record: dict[str, Any] = {"command": " ".join(command[1:]), "timeout_s": round(timeout_s)}
    start = perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=folder.parent,
            capture_output=True,
            text=True,
            timeout=max(timeout_s, 1.0),
        )
        output, record["returncode"] = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as error:
        output = _text(error.stdout) + _text(error.stderr)
        record["returncode"] = None
        record["outcome"] = f"timeout after {timeout_s:.0f} s"
    record["seconds"] = round(perf_counter() - start, 1)
    output_file.write_text(output, encoding="utf-8")
    summaries = [line.strip("= ") for line in output.splitlines() if _SUMMARY.search(line)]
    record["summary"] = summaries[-1] if summaries else None
    if "outcome" not in record:
        record["outcome"] = _outcome(record["returncode"], record["summary"] or "")
    record["output_file"] = output_file.name
    return record


def _outcome(returncode: int, summary: str) -> str:
    if returncode != 0:
        return "FAILED" if returncode == 1 else f"pytest exit status {returncode}"
    if "passed" in summary:
        return "passed"
    return "skipped (no GPU)" if "skipped" in summary else "nothing ran"


def _text(value: str | bytes | None) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value or ""
