"""Refusing up front when the machine has too little memory for the models asked for.

A load that does not fit fails late and badly: the kernel's out-of-memory killer ends the
process after minutes of conversion or loading, or the machine swaps. So before loading a
preset pair, dynaspec adds up what the weights need at least (parameters x bytes per
parameter of the dtype; the fast path holds the target twice while it builds its copy, a
quantized copy at its kernel's bytes a weight, `kernels.registry.weight_bytes`) and
a floor for everything else, and compares it with what the kernel says is available
(`MemAvailable`). The figure is a lower bound: passing the check does not promise the load
fits, failing it means the load cannot. `DYNASPEC_SKIP_MEMORY_CHECK=1` skips the check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dynaspec.backends.kernels import registry as kernel_registry
from dynaspec.errors import InsufficientMemoryError
from dynaspec.meminfo import SKIP_ENV, available_bytes, check_skipped

if TYPE_CHECKING:
    from dynaspec.models.presets import ModelPreset

GB = 1e9
OVERHEAD_BYTES = int(0.5 * GB)  # torch, transformers, the tokenizer, activations: at least


@dataclass(frozen=True)
class MemoryNeed:
    """What a load needs at least, part by part (name, bytes), and at its peak."""

    what: str  # the load, in the caller's words ("the pair qwen2.5-coder in float32")
    parts: tuple[tuple[str, int], ...]  # every part held at the peak
    overhead: int = OVERHEAD_BYTES

    @property
    def total(self) -> int:
        return sum(size for _, size in self.parts) + self.overhead

    def describe(self) -> str:
        parts = ", ".join(f"{name} {size / GB:.1f} GB" for name, size in self.parts)
        return f"{parts}, {self.overhead / GB:.1f} GB for the rest"


def weight_bytes(num_parameters: int, dtype: torch.dtype) -> int:
    """Bytes of `num_parameters` weights in `dtype`."""
    return num_parameters * dtype.itemsize


def pair_need(
    name: str,
    dtype: torch.dtype,
    target: tuple[str, int],
    draft: tuple[str, int],
    *,
    fast: bool = False,
    copy_bytes_per_weight: float | None = None,
) -> MemoryNeed:
    """A pair's need at its peak: target + draft; on the fast path the target is held twice
    while its copy is built (the draft loads after the transformers target is dropped), so
    the larger of the two. The copy takes `copy_bytes_per_weight` a parameter where given
    (a quantized copy on its kernel: `kernels.registry.weight_bytes`), else the dtype's."""
    (target_name, target_params), (draft_name, draft_params) = target, draft
    target_size = weight_bytes(target_params, dtype)
    draft_size = weight_bytes(draft_params, dtype)
    what = f"the pair {name} in {str(dtype).removeprefix('torch.')}"
    if fast and target_size >= draft_size:
        copy = "its fast copy, while it is built"
        per_weight = dtype.itemsize if copy_bytes_per_weight is None else copy_bytes_per_weight
        copy_size = int(target_params * per_weight)
        return MemoryNeed(what, ((f"target {target_name}", target_size), (copy, copy_size)))
    parts = ((f"target {target_name}", target_size), (f"draft {draft_name}", draft_size))
    return MemoryNeed(what, parts)


def check_memory(
    need: MemoryNeed,
    *,
    fixes: Sequence[str] = (),
    cli_fixes: Sequence[str] | None = None,
    available: int | None = None,
) -> None:
    """Raises InsufficientMemoryError when `need` is more than the available memory, naming
    both figures and the `fixes` (`cli_fixes` in the command line's words)."""
    if check_skipped():
        return
    available = available_bytes() if available is None else available
    if available is None or need.total <= available:
        return

    def message(fixes: Sequence[str]) -> str:
        return (
            f"loading {need.what} needs at least {need.total / GB:.1f} GB ({need.describe()}), "
            f"and this machine has {available / GB:.1f} GB available: close other programs"
            + "".join(f", {fix}" for fix in fixes)
            + f", or set {SKIP_ENV}=1 to try anyway"
        )

    raise InsufficientMemoryError(
        message(fixes), cli_message=message(fixes if cli_fixes is None else cli_fixes)
    )


def check_pair_memory(
    name: str,
    dtype: torch.dtype,
    target: ModelPreset,
    draft: ModelPreset,
    fast: bool,
    quantize: str | None = None,
) -> None:
    """Refuses before anything is converted or loaded when the machine has too little memory
    (this module); a target quantized on its kernel counts its copy at the kernel's
    bytes a weight."""
    per_weight = None if quantize is None else kernel_registry.weight_bytes(quantize, dtype)
    need = pair_need(
        name,
        dtype,
        (target.name, target.num_parameters),
        (draft.name, draft.num_parameters),
        fast=fast,
        copy_bytes_per_weight=per_weight,
    )
    fixes, cli_fixes = [], []
    if dtype == torch.float32:
        fixes.append('load in bfloat16 (dtype="bfloat16": half the memory)')
        cli_fixes.append("pass --dtype bfloat16 (half the memory)")
    check_memory(need, fixes=fixes, cli_fixes=cli_fixes)
