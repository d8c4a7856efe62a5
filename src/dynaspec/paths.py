"""Where dynaspec keeps what it makes once: the cache root (models, compiled kernels)."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def default_cache_dir() -> Path:
    """Cache root: `$DYNASPEC_CACHE`, else the platform's user cache folder + `dynaspec`.

    Linux and others: `$XDG_CACHE_HOME/dynaspec`, default `~/.cache/dynaspec`;
    macOS: `~/Library/Caches/dynaspec` (unless XDG_CACHE_HOME is set);
    Windows: `%LOCALAPPDATA%\\dynaspec\\Cache`.
    """
    explicit = os.environ.get("DYNASPEC_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "dynaspec"
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "dynaspec" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "dynaspec"
    return Path.home() / ".cache" / "dynaspec"
