"""`dynaspec models`: the presets, their sizes, what is installed and cached."""

from __future__ import annotations

import os

from dynaspec.backends.kernels.registry import KERNELS
from dynaspec.models import cache as model_cache
from dynaspec.models.dtype import machine_dtype
from dynaspec.models.presets import default_pair_name, model_presets, pair_presets

CacheDirArg = str | os.PathLike[str] | None


def _format_count(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.0f}M"


def _format_bytes(size: int) -> str:
    return f"{size / 1e9:.2f} GB" if size >= 1e9 else f"{size / 1e6:.0f} MB"


def models_report(cache_dir: CacheDirArg = None) -> str:
    """A text table of the presets: name, role, parameters, download (GGUF) size, size once
    converted in the machine's dtype, installed?, cached?"""
    root = model_cache.resolve_cache_dir(cache_dir)
    dtype = machine_dtype().dtype
    header = ("name", "role", "tokenizer", "params", "download", "converted", "installed", "cached")
    rows: list[tuple[str, ...]] = [header]
    missing_lines: list[str] = []
    for preset in model_presets().values():
        missing = model_cache.missing_packages(preset)
        if not missing:
            installed = "yes"
        elif len(missing) == len(preset.packages):
            installed = "no"
        else:
            installed = f"partly ({len(preset.packages) - len(missing)}/{len(preset.packages)})"
        if missing:
            missing_lines.append(f"  {preset.name}: {preset.pip_command(missing)}")
        cached = ", ".join(model_cache.cached_dtypes(preset, root)) or "no"
        rows.append(
            (
                preset.name,
                preset.role,
                preset.tokenizer,
                _format_count(preset.num_parameters),
                _format_bytes(preset.size),
                _format_bytes(preset.num_parameters * dtype.itemsize),
                installed,
                cached,
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    lines.append(
        "tokenizer: its family and the model's vocabulary rows; a draft of the target's family "
        "pairs directly, any other with --cross-tokenizer (assistant_tokenizer=)"
    )
    lines.append(
        "download: the model packages (a quantized GGUF); converted: the transformers "
        f"folder made from it on first use, in this machine's dtype "
        f"({model_cache.dtype_name(dtype)})"
    )
    lines.append("")
    lines.append("pairs:")
    for pair in pair_presets().values():
        default = " (default)" if pair.name == default_pair_name() else ""
        lines.append(f"  {pair.name}{default}: {pair.target} + {pair.draft}")
    lines.append("")
    lines.append(f"cache: {root} (set DYNASPEC_CACHE to move it)")
    lines.append(f"dtype on this machine: {machine_dtype().line()}")
    lines.extend(kernel.readiness() for kernel in KERNELS.values())
    if missing_lines:
        lines.append("to install:")
        lines.extend(missing_lines)
    return "\n".join(lines)
