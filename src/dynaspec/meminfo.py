"""The memory this machine has available, as Linux's kernel says (`MemAvailable` in
/proc/meminfo): models/memory.py checks a load against it, batch.py a batch's KV cache.
`DYNASPEC_SKIP_MEMORY_CHECK=1` turns both checks off."""

from __future__ import annotations

import os
from pathlib import Path

SKIP_ENV = "DYNASPEC_SKIP_MEMORY_CHECK"
MEMINFO = Path("/proc/meminfo")


def available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """The memory the kernel says can be used without swapping (MemAvailable); None where
    it does not say (not Linux)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_skipped() -> bool:
    """Whether the user turned the memory checks off (DYNASPEC_SKIP_MEMORY_CHECK=1)."""
    return os.environ.get(SKIP_ENV, "") not in ("", "0")
