"""The package's folders are its layers (docs/design/architecture.md): imports point down only,
there are no import cycles, and files and functions stay small enough to read."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "dynaspec"

# Higher imports lower, never the reverse; one rank holds layers that must not import each
# other (policies, backends and drafters only meet in core's protocols).
RANKS = {
    "errors": 0,
    "cpu": 0,  # the CPU's flags (models/dtype.py, backends/kernels/int8.py)
    "meminfo": 0,  # the memory available (models/memory.py, batch.py)
    "paths": 0,  # the cache root (models/cache.py, backends/kernels/int8.py)
    "core": 1,
    "compat": 1.5,  # transformers' generation keywords -> the values core's round reads
    "policies": 2,
    "backends": 2,
    "drafters": 2,
    "mismatch": 2.5,  # a greedy divergence: a tie or a bug (one target forward)
    "request": 2.8,  # one sequence's Request, built for every entry point below the CLI
    "batch": 3,  # generate() over a batch (input_ids (B, T)); generation dispatches to it
    "continuous": 3.2,  # rows that join and leave a running batch (serve/ builds on it)
    "generation": 3.5,
    "prompts": 3.6,  # a user message into input ids; generate --prompts-file
    "compare": 3.6,  # generate --compare: the target alone, timed, and the outputs compared
    "models": 4,
    "integrations": 5,  # proposers that other engines call (vLLM), built on models
    "serve": 5.5,  # the OpenAI-compatible server (builds on continuous, models)
    "eval": 5.7,  # the instruments, beside the product: the load tester builds a server
    "cli": 6,
    "__main__": 7,  # `python -m dynaspec` runs the CLI
    "__init__": 6,  # the public facade re-exports from every layer below the CLI
}
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1]
    return ".".join(parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, annotations: bool = False, top_level_only: bool = False) -> set[str]:
    """dynaspec modules imported anywhere in the file (inside functions too, unless
    `top_level_only`); the annotations-only imports under `if TYPE_CHECKING:` only with
    `annotations`."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node) and not annotations:
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
        if top_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            skipped.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("dynaspec"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith("dynaspec"):
                continue
            for alias in node.names:  # `from dynaspec.models import cache` imports a module
                child = f"{node.module}.{alias.name}"
                is_module = (PACKAGE.parent / child.replace(".", "/")).with_suffix(".py").exists()
                is_package = (PACKAGE.parent / child.replace(".", "/")).is_dir()
                found.add(child if is_module or is_package else node.module)
    return found


def _graph(annotations: bool = False) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, annotations) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_layer_has_a_rank() -> None:
    layers = {_layer(module) for module in _graph()}
    assert layers <= set(RANKS), f"give {sorted(layers - set(RANKS))} a rank in RANKS"


def test_imports_point_down_only() -> None:
    wrong = []
    for module, imported in _graph().items():
        for target in imported:
            if target == "dynaspec" and _layer(module) not in ("__init__", "cli", "__main__"):
                wrong.append(f"{module} imports the dynaspec facade")
                continue
            low, high = _layer(target), _layer(module)
            if low == high or target == "dynaspec":
                continue
            if RANKS[low] >= RANKS[high]:
                wrong.append(f"{module} ({high}) imports {target} ({low})")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(sorted(wrong))


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph` (module -> modules it imports): its strongly connected
    components of more than one module, and any module that imports itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1 or module in graph[module]:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_there_are_no_import_cycles() -> None:
    """No cycle anywhere, within a folder too, and the annotations-only imports count: two
    modules that need each other's names are one concern or need a protocol between them."""
    cycles = _cycles(_graph(annotations=True))
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_the_checker_sees_a_cycle(tmp_path: Path) -> None:
    plan = tmp_path / "plan.py"
    plan.write_text("if TYPE_CHECKING:\n    from dynaspec.policies.adaptive import A\n")
    graph = {
        "dynaspec.policies.adaptive": {"dynaspec.policies.plan", "dynaspec.core.round"},
        "dynaspec.policies.plan": _imports(plan, annotations=True),
        "dynaspec.core.round": set(),
        "dynaspec.policies": {"dynaspec.policies.adaptive"},
    }
    assert _cycles(graph) == [["dynaspec.policies.adaptive", "dynaspec.policies.plan"]]
    graph["dynaspec.policies.adaptive"] = {"dynaspec.policies"}  # a module importing its package
    assert _cycles(graph) == [["dynaspec.policies", "dynaspec.policies.adaptive"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "from dynaspec.eval import data\nif TYPE_CHECKING:\n    import dynaspec.cli\n"
    )
    assert _imports(source) == {"dynaspec.eval.data"}


def _instrument_imports(files: dict[str, Path]) -> list[str]:
    """Imports of the instruments (eval/) from outside them, for {module: path}: every one
    but the CLI's, and the CLI's outside a function (it imports them in the command that
    needs them)."""
    wrong = []
    for module, path in sorted(files.items()):
        if _layer(module) == "eval":
            continue
        imported = _imports(path, top_level_only=_layer(module) == "cli")
        where = " at the top" if _layer(module) == "cli" else ""
        wrong += [f"{module} imports {t}{where}" for t in sorted(imported) if _layer(t) == "eval"]
    return wrong


def test_only_the_cli_imports_the_instruments_inside_its_commands() -> None:
    files = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    wrong = _instrument_imports(files)
    assert not wrong, "the product imports the instruments (eval/):\n" + "\n".join(wrong)


def test_the_instrument_rule_can_fail(tmp_path: Path) -> None:
    served = tmp_path / "served.py"
    served.write_text("def f():\n    from dynaspec.eval import loadtest\n")
    top = tmp_path / "top.py"
    top.write_text("from dynaspec.eval.bench.args import add_bench_arguments\n")
    inside = tmp_path / "inside.py"
    inside.write_text("def f():\n    from dynaspec.eval.bench.run import run_bench\n")
    files = {"dynaspec.serve.x": served, "dynaspec.cli": top, "dynaspec.eval.y": top}
    assert _instrument_imports(files) == [
        "dynaspec.cli imports dynaspec.eval.bench.args at the top",
        "dynaspec.serve.x imports dynaspec.eval.loadtest",
    ]
    assert _instrument_imports({"dynaspec.cli": inside}) == []


# `dynaspec generate` (with --compare, --prompts-file) and `dynaspec serve` (up to uvicorn)
# on the tiny pair, then the dynaspec.eval modules loaded; `bench`'s parser shows the probe
# sees them when they are.
_RUN_THE_PRODUCT = """
import importlib.util, json, sys
from dynaspec import cli
import dynaspec.serve.args as serve_args, dynaspec.serve.run as serve_run

def loaded():
    return sorted(m for m in sys.modules if m.startswith("dynaspec.eval"))

found = {}
tiny = ["--pair", "tiny", "--max-new-tokens", "4"]
found["generate"] = cli.main(["generate", *tiny, "--compare", "def f(x):"]), loaded()
found["prompts-file"] = cli.main(["generate", *tiny, "--prompts-file", sys.argv[1]]), loaded()
serve_run.serve = lambda *args, **kwargs: None  # everything but uvicorn's loop
if importlib.util.find_spec("fastapi") is None:  # without the serve extra: up to the app
    serve_args.require = lambda *modules: None
    serve_run.build_app = lambda *args, **kwargs: None
found["serve"] = cli.main(["serve", "--pair", "tiny", "--port", "0"]), loaded()
cli.build_parser("bench")
found["bench"] = 0, loaded()
print(json.dumps(found))
"""


def test_generate_and_serve_load_no_instrument(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def f(x):\nclass A:\n")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    done = subprocess.run(
        [sys.executable, "-c", _RUN_THE_PRODUCT, str(prompts)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for command in ("generate", "prompts-file", "serve"):
        assert found[command] == [0, []], f"dynaspec {command}: {found[command]}"
    assert "dynaspec.eval.bench.args" in found["bench"][1]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.name))
def test_files_and_functions_stay_small(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_FILE_LINES, f"{path}: split it (over 600 lines)"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, f"{path}: functions over {MAX_FUNCTION_LINES} lines: {long}"
