"""The grounded task: prompts whose answer copies the prompt, built from the offline data."""

from __future__ import annotations

import ast
import re

import pytest

from dynaspec.errors import ConfigError
from dynaspec.eval.data import TASKS, load_prompts
from dynaspec.eval.grounded import (
    KINDS,
    grounded_prompts,
    variable_to_rename,
    without_annotations,
    without_docstrings,
)

CODE = '''
from typing import List

def total(values: List[int], *rest: int, scale: float = 1.0, **options: str) -> float:
    """Sum, scaled."""
    result: float = 0.0
    pending: int
    for value in values:
        result += value
    return result * scale

class Box:
    """A box."""
    def size(self) -> int:
        """Its size."""
        return 1
'''


def test_without_annotations_removes_every_annotation() -> None:
    code = without_annotations(ast.parse(CODE))
    tree = ast.parse(code)
    for node in ast.walk(tree):
        assert not isinstance(node, ast.AnnAssign) or node.value is None
        if isinstance(node, ast.arg):
            assert node.annotation is None
        if isinstance(node, ast.FunctionDef):
            assert node.returns is None
    assert "def total(values, *rest, scale=1.0, **options):" in code
    assert "result = 0.0" in code and '"""Sum, scaled."""' in code


def test_without_docstrings_removes_them_and_keeps_the_code() -> None:
    code = without_docstrings(ast.parse(CODE))
    assert '"""' not in code
    assert "return result * scale" in code and "values: List[int]" in code
    only_docstring = without_docstrings(ast.parse('def f():\n    """Doc."""\n'))
    assert only_docstring == "def f():\n    pass"


def test_variable_to_rename() -> None:
    assert variable_to_rename(ast.parse(CODE)) == "result"  # the first assigned local
    assert variable_to_rename(ast.parse("def f(a, b):\n    return a")) == "a"
    assert variable_to_rename(ast.parse("x = 1")) is None


def test_grounded_prompts_by_kind() -> None:
    kinds = grounded_prompts([("lee/0", "An article.")], [("HumanEval/0", CODE)])
    assert [len(group) for group in kinds] == [1, 1, 1, 1]
    summary, hints, rename, docstrings = (group[0] for group in kinds)
    assert summary.id == "lee/0:quote-summary" and "quoting its key sentences" in summary.text
    assert summary.text.endswith("An article.") and summary.raw == "An article."
    assert hints.id == "HumanEval/0:type-hints" and "-> float" not in hints.text
    assert "Rename the variable `result` to `new_result`" in rename.text
    assert '"""' not in docstrings.raw and docstrings.raw in docstrings.text


def test_load_grounded_interleaves_the_kinds_reproducibly() -> None:
    prompts = load_prompts("grounded", 8, seed=1)
    assert [p.id.split(":")[1] for p in prompts] == list(KINDS) * 2
    assert prompts[:3] == load_prompts("grounded", 3, seed=1)
    assert prompts != load_prompts("grounded", 8, seed=2)
    assert len({p.id for p in prompts}) == 8


def test_every_grounded_prompt_is_well_formed() -> None:
    prompts = load_prompts("grounded", max_prompt_chars=500)
    assert len(prompts) == 300 + 3 * 164
    for prompt in prompts:
        kind = prompt.id.split(":")[1]
        assert prompt.raw and prompt.raw in prompt.text
        if kind == "quote-summary":
            assert len(prompt.raw) <= 500
            continue
        tree = ast.parse(prompt.raw)  # the code parses
        if kind == "rename":
            old = re.search(r"variable `(\w+)`", prompt.text).group(1)
            assert re.search(rf"\b{old}\b", prompt.raw)
        if kind == "docstrings":
            assert all(
                ast.get_docstring(node) is None
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef)
            )


def test_several_tasks_and_all() -> None:
    prompts = load_prompts("grounded,code", 2)
    assert [p.task for p in prompts] == ["grounded", "code"] * 2
    assert [p.task for p in load_prompts("all", 1)] == list(TASKS)  # grounded is not in all
    with pytest.raises(ConfigError, match="unknown task 'nope'.*'grounded'"):
        load_prompts("code,nope", 1)
    with pytest.raises(ConfigError, match="no task"):
        load_prompts(" , ", 1)
    with pytest.raises(ConfigError, match="grounded has only 792 prompts"):
        load_prompts("grounded", 793)
