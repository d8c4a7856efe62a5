"""`dynaspec loadtest` with the tiny pair: concurrent clients (1, 2, 4) against a server it
starts on loopback; nothing is lost or fails, every output equals the target alone's, and the
record names what was run."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

from dynaspec.cli import main  # noqa: E402


def test_loadtest_of_the_tiny_pair(tmp_path, capsys) -> None:
    argv = ["loadtest", "--pair", "tiny", "--clients", "1,2,4", "--requests", "2"]
    argv += ["--max-tokens", "12", "--max-batch", "3", "--out", str(tmp_path), "--timeout", "300"]
    assert main(argv) == 0
    record = json.loads((tmp_path / "loadtest.json").read_text())
    assert [run["clients"] for run in record["runs"]] == [1, 2, 4]
    for run in record["runs"]:
        total = run["clients"] * 2
        assert (run["completed"], run["failed"], run["lost"]) == (total, 0, 0)
        assert run["equal_to_target_alone"] == total and run["differing"] == []
        assert run["tokens_per_s_total"] > 0 and run["ttft_p95_s"] >= run["ttft_p50_s"]
    assert record["machine"] and record["git"] and record["versions"]["torch"]
    table = (tmp_path / "loadtest.md").read_text()
    assert sum(line.startswith("| ") for line in table.splitlines()) == 4  # header + 3 runs
    assert "4 of 4 outputs equal" in capsys.readouterr().out


def test_clients_must_be_counts(capsys) -> None:
    assert main(["loadtest", "--pair", "tiny", "--clients", "1,x"]) == 2
    assert "--clients" in capsys.readouterr().err
