"""The compiled variant of the device check: the same costs through the static-cache,
torch.compile'd adapter, when that fast path exists in this tree.

The seam it uses: `dynaspec.backends.static.make_fast(model, compile=True)`, which returns a
`ModelAdapter` (Llama- and Qwen2-style models), and, when the adapter has one,
`warmup(max_length)`, which compiles every shape before anything is timed. Until the fast path
lands the variant is skipped with a note; a different seam is skipped with a note too, never
guessed at. Compiling costs tens of seconds per model, so the check compiles one pair (the
smallest) after every eager measurement, and only with enough of its time budget left.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from time import perf_counter
from typing import Any

import torch

from dynaspec.eval.cost_model import measure_costs
from dynaspec.eval.devicecheck.shapes import PairShape, build_model

# Time budget a compiled measurement needs before it starts (compiling included).
MIN_SECONDS_LEFT = 60.0


def compiled_factory() -> tuple[Callable[[Any], Any] | None, str | None]:
    """(model -> compiled adapter, None), or (None, why the variant is skipped)."""
    try:
        static = importlib.import_module("dynaspec.backends.static")
    except ImportError:
        return None, "no compiled fast path in this tree (dynaspec.backends.static is absent)"
    make_fast = getattr(static, "make_fast", None)
    if make_fast is None or "compile" not in inspect.signature(make_fast).parameters:
        return None, "dynaspec.backends.static has no make_fast(model, compile=...)"
    return (lambda model: make_fast(model, compile=True)), None


def compiled_variant(
    pair: PairShape, prompt: torch.Tensor, settings: Any, progress: Any
) -> dict[str, Any]:
    """Costs (T(n), draft per token, prefills) of `pair` through compiled adapters, after
    compiling every shape; or why it was skipped."""
    factory, reason = compiled_factory()
    if factory is None:
        return {"skipped": reason}
    if progress.left() < MIN_SECONDS_LEFT:
        return {"skipped": f"less than {MIN_SECONDS_LEFT:.0f} s of the time budget left"}
    device, dtype = torch.device(settings.device), getattr(torch, settings.dtype)
    progress.log(f"{pair.name}: compiled variant (building, compiling every shape)")
    adapters = [
        factory(build_model(shape, device, dtype, seed))
        for seed, shape in enumerate((pair.target, pair.draft))
    ]
    started = perf_counter()
    longest = prompt.shape[1] + 2 * settings.max_verify_tokens
    for adapter in adapters:
        warmup = getattr(adapter, "warmup", None)
        if callable(warmup):
            warmup(longest)
    compile_s = perf_counter() - started
    progress.log(f"{pair.name}: compiled in {compile_s:.0f} s; T(n), draft per token, prefills")
    costs = measure_costs(
        *adapters, prompt, max_tokens=settings.max_verify_tokens, reps=settings.cost_reps
    )
    return {"costs": costs.to_json(), "compile_s": compile_s}
