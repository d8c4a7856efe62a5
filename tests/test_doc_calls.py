"""Every keyword the README and the docs pass to dynaspec's public calls exists.

In the Python code blocks and the inline code of README.md and docs/ (design notes
included), each call of `generate`, `load_pair`, `load_model` or `load_model_set` is read
with `ast`, and each keyword it passes must be a parameter of that function (for
`generate`, one of `dynaspec.GenerationKwargs` too). A keyword renamed in the code, or one
the docs made up (`schedule="adaptive"`), fails here.
"""

from __future__ import annotations

import ast
import inspect
import re
import typing
from pathlib import Path

import pytest

import dynaspec
from dynaspec.models.loading import load_model_set

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+\([^`\n]*\))`(?!`)")


def _parameters(function) -> frozenset[str]:
    return frozenset(inspect.signature(function).parameters) - {"kwargs"}


KEYWORDS = {
    "generate": _parameters(dynaspec.generate)
    | frozenset(typing.get_type_hints(dynaspec.GenerationKwargs)),
    "load_pair": _parameters(dynaspec.load_pair),
    "load_model": _parameters(dynaspec.load_model),
    "load_model_set": _parameters(load_model_set),
}


def _name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return func.attr if func.value.id == "dynaspec" else None
    return func.id if isinstance(func, ast.Name) else None


def calls_in(text: str) -> list[tuple[str, list[str]]]:
    """(function, keywords) of every call of a checked function in the text's Python."""
    pieces = PYTHON_BLOCK.findall(text) + SPAN.findall(PYTHON_BLOCK.sub("", text))
    found = []
    for piece in pieces:
        try:
            tree = ast.parse(piece.replace("...,", "_,"))
        except SyntaxError:
            continue  # prose in backticks, a fragment
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _name(node) in KEYWORDS:
                found.append((_name(node), [k.arg for k in node.keywords if k.arg]))
    return found


def unknown_keywords(text: str) -> list[str]:
    return [
        f"{function}({keyword}=)"
        for function, keywords in calls_in(text)
        for keyword in keywords
        if keyword not in KEYWORDS[function]
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_documented_keyword_exists(document: Path) -> None:
    unknown = unknown_keywords(document.read_text(encoding="utf-8"))
    assert not unknown, f"{document.relative_to(ROOT)}: keywords the code does not take: {unknown}"


def test_the_docs_have_calls_to_check() -> None:
    found = [call for path in DOCUMENTS for call in calls_in(path.read_text(encoding="utf-8"))]
    assert {"generate", "load_pair", "load_model"} <= {function for function, _ in found}
    assert sum(len(keywords) for _, keywords in found) >= 30


@pytest.mark.parametrize(
    "text",
    [
        '```python\nout = dynaspec.generate(t, d, ids, schedule="adaptive")\n```\n',
        'Use `load_pair(..., static=True, draft_quantise="int4")` there.\n',
        "```python\nmodel, tok = load_model('x', precision='bf16')\n```\n",
    ],
)
def test_a_made_up_keyword_is_caught(text: str) -> None:
    assert len(unknown_keywords(text)) == 1


def test_known_keywords_pass() -> None:
    text = (
        "```python\nout = dynaspec.generate(t, d, ids, num_assistant_tokens_schedule="
        '"adaptive", repetition_penalty=1.1, prompt_lookup_num_tokens=32)\n```\n'
        'and `load_pair(..., static=True, draft_quantize="w4a8")`\n'
    )
    assert unknown_keywords(text) == []
    assert len(calls_in(text)) == 2
