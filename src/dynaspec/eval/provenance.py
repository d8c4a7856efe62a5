"""Where a result came from: library versions, machine, git state. Recorded next to every
benchmark and oracle result."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from dynaspec.models.dtype import cpu_features, machine_dtype


def library_versions() -> dict[str, str | None]:
    """Versions of the libraries that decide the timings."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "transformers", "dynaspec", "tokenizers", "numpy"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def machine_info() -> dict[str, Any]:
    """Platform, CPU model and counts, the CPU's instruction sets that decide speed (avx2,
    avx512f, avx512_bf16, amx) and torch's CPU capability, the dtype dynaspec chooses for
    this machine and why, torch threads."""
    cpu_model = None
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    affinity = getattr(os, "sched_getaffinity", None)
    machine = machine_dtype()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model or platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(affinity(0)) if affinity else os.cpu_count(),
        "cpu_features": cpu_features().record(),
        "machine_dtype": machine.name,
        "machine_dtype_reason": machine.reason,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }


def git_state() -> dict[str, Any]:
    """HEAD commit of the dynaspec source tree and whether the tree has changes."""
    root = Path(__file__).resolve().parent

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *argv], cwd=root, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain") if sha else None
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def command_line(argv: Sequence[str] | None = None) -> str | None:
    """The command that started this process (`sys.argv` by default) when it is `dynaspec`
    or a dynaspec module run with `python -m`; None for anything else (pytest, a script)."""
    argv = list(sys.argv if argv is None else argv)
    if not argv:
        return None
    if Path(argv[0]).name == "dynaspec":
        return shlex.join(["dynaspec", *argv[1:]])
    package = Path(__file__).resolve().parents[1]  # src/dynaspec
    try:
        parts = Path(argv[0]).resolve().with_suffix("").relative_to(package.parent).parts
    except ValueError:
        return None
    module = ".".join(parts).removesuffix(".__main__")
    return shlex.join(["python", "-m", module, *argv[1:]])


def equivalent_command(
    subcommand: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    args: argparse.Namespace,
) -> str:
    """`dynaspec SUBCOMMAND ...` with the options of `args` that differ from their defaults
    (for a run started from Python, whose process command line says nothing about it);
    `add_arguments` adds the subcommand's options to a parser."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    words = ["dynaspec", subcommand]
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            words.append(flag)
        elif isinstance(action, argparse.BooleanOptionalAction):  # --x / --no-x
            words.append(action.option_strings[0 if value else 1])
        else:
            words += [flag, str(value)]
    return shlex.join(words)
