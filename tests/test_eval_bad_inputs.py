"""Bad input to `dynaspec bench` and `dynaspec oracle` ends in one clean error (exit 1, one
`error:` line on stderr, no traceback), never in a run on the wrong data."""

from __future__ import annotations

import json

import pytest

from dynaspec.cli import main

# (file content, words the error must contain)
BAD_PROMPT_FILES = {
    "truncated": ('{"prompt": "a"}\n{"prompt": "b', "line 2: not valid JSON"),
    "not an object": ('["a", "b"]\n', "line 1: expected a JSON object, got list"),
    "no prompt": ('{"id": "x"}\n', 'line 1: has neither "prompt"'),
    "not text": (b"\xbe\xef\x00\x01", "is not UTF-8"),
}


def _write(path, content):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def _fails_cleanly(argv, capsys, *words):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    for word in words:
        assert word in err, err


@pytest.mark.parametrize("case", BAD_PROMPT_FILES)
def test_bench_rejects_a_bad_prompts_file(case, tmp_path, capsys):
    content, words = BAD_PROMPT_FILES[case]
    path = _write(tmp_path / "prompts.jsonl", content)
    argv = ["bench", "--pair", "tiny", "--prompts", str(path), "--out", str(tmp_path / "out")]
    _fails_cleanly(argv, capsys, str(path), words)
    assert not (tmp_path / "out").exists()  # failed before any model or output


@pytest.mark.parametrize("case", BAD_PROMPT_FILES)
def test_oracle_rejects_a_bad_prompts_file(case, tmp_path, capsys):
    content, words = BAD_PROMPT_FILES[case]
    path = _write(tmp_path / "prompts.jsonl", content)
    argv = ["oracle", "--smoke", "--prompts", str(path), "--out", str(tmp_path / "out")]
    _fails_cleanly(argv, capsys, str(path), words)
    assert not (tmp_path / "out" / "oracle_costs.json").exists()


SMALL_ORACLE = ["oracle", "--smoke", "--task", "code", "--n", "1", "--max-new-tokens", "8"]
SMALL_ORACLE += ["--cost-reps", "1", "--cost-max-n", "3", "--no-progress"]


@pytest.fixture(scope="module")
def oracle_run(tmp_path_factory):
    """A finished small oracle run (float32) to resume from."""
    out = tmp_path_factory.mktemp("oracle")
    assert main([*SMALL_ORACLE, "--out", str(out)]) == 0
    return out


def test_resume_with_remeasured_costs_checks_the_setup(oracle_run, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    for name in ("oracle_records.jsonl", "oracle_costs.json"):
        (out / name).write_bytes((oracle_run / name).read_bytes())
    resume = [*SMALL_ORACLE, "--out", str(out), "--resume", "--remeasure-costs"]
    _fails_cleanly([*resume, "--dtype", "bfloat16"], capsys, "'dtype': 'float32'", "--out")
    assert main(resume) == 0  # the same setup resumes and measures the costs afresh
    costs = json.loads((out / "oracle_costs.json").read_text())
    assert costs["setup"]["dtype"] == "float32"


@pytest.mark.parametrize("name", ["oracle_records.jsonl", "oracle_costs.json"])
def test_resume_from_a_damaged_file_says_what_to_delete(name, oracle_run, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    for stored in ("oracle_records.jsonl", "oracle_costs.json"):
        (out / stored).write_bytes((oracle_run / stored).read_bytes())
    damaged = out / name
    damaged.write_text(damaged.read_text()[:-40])  # a run killed while writing it
    _fails_cleanly([*SMALL_ORACLE, "--out", str(out), "--resume"], capsys, str(damaged), "delete")
