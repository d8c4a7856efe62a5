"""This CPU's instruction-set flags, as Linux's /proc/cpuinfo names them (models/dtype.py picks
the dtype by them, backends/kernels/build.py whether a compiled kernel can run)."""

from __future__ import annotations

from pathlib import Path


def cpuinfo_text() -> str:
    """/proc/cpuinfo's text ("" where there is none: another OS)."""
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def flags_line(cpuinfo: str) -> frozenset[str] | None:
    """Every flag on the first `flags` line of /proc/cpuinfo's text (x86 Linux); None where
    there is no such line (another OS or architecture)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None
