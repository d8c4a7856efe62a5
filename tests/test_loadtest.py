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
from dynaspec.eval.agent import RETRY_NOTE  # noqa: E402


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


def test_the_server_sends_token_ids_and_a_differing_output_is_classified(tmp_path) -> None:
    """Every request of the run carries its token ids (vLLM's `return_token_ids`). An output
    that parts from the target alone's is classified from them: the target's own ids with
    one token changed to a far-from-top one is a BUG (exit 1 through `_write`), the same ids
    are not counted, and a server that sent no ids leaves it "unknown"."""
    from dataclasses import replace
    from types import SimpleNamespace

    import torch

    from dynaspec.eval.load import LoadConfig, run_load
    from dynaspec.eval.loadtest import _alone, _write, differing
    from dynaspec.models.tiny import tiny_pair
    from dynaspec.serve.config import ServeConfig
    from dynaspec.serve.run import build_app, in_thread

    target, draft, tokenizer = tiny_pair()
    app = build_app(target, draft, tokenizer, ServeConfig(model_name="tiny", port=0))
    with in_thread(app) as url:
        config = LoadConfig(url + "/v1", "tiny", 2, 1, 10, ("def f(x):", "import os"))
        result = run_load(replace(config, token_ids=True))
    alone = _alone(target, tokenizer, [result], 10)
    for r in result.results:
        assert r.token_ids == alone[r.prompt].new_ids and r.prompt_token_ids is not None
    assert differing(target, result, alone) == []

    first = result.results[0]
    reference = alone[first.prompt]
    logits = target(reference.prompt_ids).logits[0, -1]
    worst = int(torch.argmin(logits))
    broken = replace(first, text=first.text + "!", token_ids=(worst, *reference.new_ids[1:]))
    unknown = replace(first, text=first.text + "!", token_ids=None)
    faked = replace(result, results=(broken, unknown))
    found = differing(target, faked, alone)
    assert [entry["kind"] for entry in found] == ["BUG", "unknown"]
    assert found[0]["position"] == 0
    args = SimpleNamespace(out=str(tmp_path), label=None, git_at_start=None)
    assert _write(args, [faked], alone, target) == 1
    assert "not at a tie (a BUG)" in (tmp_path / "loadtest.md").read_text()


def test_the_agent_task_on_the_tiny_pair(tmp_path) -> None:
    """`--task agent` runs its sessions on the tiny pair too (a smoke run of the path the
    real pair takes): turns the tiny model's context cannot hold are refused by the server
    and counted as failed, not decoded alone; the warm-up request's text (the first turn's
    prompt) is in a suffix cache scope of its own, so it drafts nothing of the first turn;
    each run records the tokens each source drafted."""
    argv = ["loadtest", "--pair", "tiny", "--task", "agent", "--prompt-seed", "2"]
    argv += ["--clients", "1", "--requests", "3", "--max-tokens", "16", "--prompt-lookup", "32"]
    assert main([*argv, "--out", str(tmp_path), "--timeout", "300"]) == 0
    record = json.loads((tmp_path / "loadtest.json").read_text())
    (run,) = record["runs"]
    assert (run["completed"], run["failed"], run["lost"]) == (1, 2, 0)  # turns 2, 3: too long
    assert run["equal_to_target_alone"] == 1
    first = record["requests"][0][0]
    assert first["ok"] and first["prompt"].startswith("Complete the following Python function")
    assert first["extra"]["sources"]["suffix"]["drafted"] == 0
    assert set(run["sources"]) == {"lookup", "suffix", "model"}
    assert run["sources"]["lookup"]["drafted"] == first["extra"]["sources"]["lookup"]["drafted"]
    assert "tokens drafted: lookup" in (tmp_path / "loadtest.md").read_text()


def test_the_agent_retry_task_on_the_tiny_pair(tmp_path, monkeypatch) -> None:
    """`--task agent-retry` (eval/agent.py): client k runs session k, then the retry of
    session (k + 1) mod 2, sent once that session's last turn has ended; every timed request
    presents one API key, so the first attempt's prompt and whole reply are in the suffix
    cache scope the retry reads (the warm-up's scope is its own) before the retry joins the
    batch. The tiny context holds only some turns (the others are refused, as in the agent
    task); the tiny random models' retries part from the first replies at their first token,
    so what the cache drafts for them is not accepted here: the real pair's runs measure it."""
    from dynaspec.drafters.batch import BatchDrafter
    from dynaspec.drafters.suffix_cache import SuffixCache
    from dynaspec.eval.loadtest import WARM_UP_KEY
    from dynaspec.serve.sources import scope_of

    events: list[tuple[str, str | None, tuple[int, ...]]] = []  # (what, scope, tokens)
    join, add = BatchDrafter.join, SuffixCache.add

    def spy_join(self, prompt, scope=None, sources=None):
        events.append(("join", scope, tuple(prompt.tolist())))
        return join(self, prompt, scope, sources)

    def spy_add(self, tokens, scope="default"):
        tokens = [int(token) for token in tokens]
        events.append(("add", scope, tuple(tokens)))
        return add(self, tokens, scope)

    monkeypatch.setattr(BatchDrafter, "join", spy_join)
    monkeypatch.setattr(SuffixCache, "add", spy_add)
    argv = ["loadtest", "--pair", "tiny", "--task", "agent-retry", "--prompt-seed", "2"]
    argv += ["--clients", "2", "--requests", "6", "--max-tokens", "16"]
    assert main([*argv, "--out", str(tmp_path), "--timeout", "300"]) == 0
    record = json.loads((tmp_path / "loadtest.json").read_text())
    (run,) = record["runs"]
    assert (run["completed"], run["failed"], run["lost"]) == (8, 4, 0)  # 4 turns: too long
    assert run["equal_to_target_alone"] == 8

    fleet = scope_of("key", "Bearer none", None)  # the timed clients' one key

    def where(what: str, ids: list[int]) -> int:
        """The first event `what` in the fleet's scope whose tokens begin with `ids`."""
        return next(
            i
            for i, (kind, scope, tokens) in enumerate(events)
            if (kind, scope) == (what, fleet) and tokens[: len(ids)] == tuple(ids)
        )

    by = {(r["client"], r["index"]): r for r in record["requests"][0]}
    for client in (0, 1):
        first, retry = by[1 - client, 0], by[client, 3]  # the session this client retries
        assert first["ok"] and retry["ok"] and retry["prompt"] == RETRY_NOTE + first["prompt"]
        last = by[1 - client, 2]  # that session's last turn
        assert retry["sent_s"] >= last["sent_s"] + last["latency_s"]
        stored = where("add", first["prompt_token_ids"])  # its prompt and whole reply
        assert events[stored][2] == tuple(first["prompt_token_ids"] + first["token_ids"])
        assert stored < where("join", retry["prompt_token_ids"])  # before the retry reads
    warm_up = scope_of("key", f"Bearer {WARM_UP_KEY}", None)
    assert {scope for _, scope, _ in events} == {fleet, warm_up}
    assert sum(e[1] == warm_up for e in events) == 2  # the warm-up's join and add only


def test_agent_retry_needs_whole_rounds_and_no_other_task(capsys) -> None:
    base = ["loadtest", "--pair", "tiny", "--task", "agent-retry"]
    assert main([*base, "--requests", "3"]) == 2
    assert "multiples of 6" in capsys.readouterr().err
    assert main(["loadtest", "--pair", "tiny", "--task", "agent-retry,code"]) == 2
    assert "name it alone" in capsys.readouterr().err
