"""The compiled variant of the device check: the same costs through the static-cache,
torch.compile'd adapter, when that fast path exists in this tree.

The seam it expects: `dynaspec.backends.static.StaticAdapter(model, compile=True)`, a
`ModelAdapter`. Until that lands the variant is skipped with a note saying so; a different
name or signature is skipped with a note too, never guessed at.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch

from dynaspec.eval.cost_model import measure_costs


def compiled_adapter_class() -> tuple[Any, str | None]:
    """(the compiled adapter class, None), or (None, why the variant is skipped)."""
    try:
        static = importlib.import_module("dynaspec.backends.static")
    except ImportError:
        return None, "no compiled fast path in this tree (dynaspec.backends.static is absent)"
    adapter_class = getattr(static, "StaticAdapter", None)
    if adapter_class is None or "compile" not in inspect.signature(adapter_class).parameters:
        return None, "dynaspec.backends.static has no StaticAdapter(model, compile=...)"
    return adapter_class, None


def compiled_variant(
    target: Any, draft: Any, prompt: torch.Tensor, settings: Any, progress: Any
) -> dict[str, Any]:
    """Costs (T(n), draft per token, prefills) through the compiled adapters, or a skip note."""
    adapter_class, reason = compiled_adapter_class()
    if adapter_class is None:
        return {"skipped": reason}
    if progress.left() <= 0:
        return {"skipped": "the time budget was spent"}
    progress.log("  compiled: T(n), draft per token, prefills (compiling first)")
    costs = measure_costs(
        adapter_class(target, compile=True),
        adapter_class(draft, compile=True),
        prompt,
        max_tokens=settings.max_verify_tokens,
        reps=settings.cost_reps,
    )
    return {"costs": costs.to_json()}
