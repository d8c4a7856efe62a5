"""Where a result came from: library versions, machine, git state. Recorded next to every
benchmark and oracle result."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
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
