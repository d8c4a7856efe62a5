"""Whether a model's logits are finite: NaN or inf anywhere is a NumericalError that names
the model and the likely cause, raised before a token is chosen from them."""

from __future__ import annotations

from typing import Any

import torch

from dynaspec.errors import NumericalError


def all_finite(logits: torch.Tensor) -> torch.Tensor:
    """0-dim bool, on the logits' device: whether every value is finite, read from the
    smallest and the largest (a NaN anywhere makes both NaN, an inf is one of them). On the
    2-core EPYC that is 22 us for a (V,) bf16 row of 152k logits against 203 us for
    `torch.isfinite(logits).all()`, 0.3 against 6.5 ms for 33 rows."""
    low, high = torch.aminmax(logits)
    return torch.isfinite(low) & torch.isfinite(high)


def check_finite(finite: bool, model: Any) -> None:
    """Raises NumericalError when a model's logits were not all finite (`finite` False)."""
    if finite:
        return
    name = getattr(model, "name", None) or type(getattr(model, "model", model)).__name__
    raise NumericalError(
        f"{name} produced NaN/inf logits; check the weights and the dtype (float16 on CPU "
        "overflows: use bfloat16 or float32)"
    )


def require_finite(logits: torch.Tensor, model: Any) -> None:
    """Raises NumericalError when any of a model's `logits` is NaN or inf (one transfer)."""
    check_finite(bool(all_finite(logits)), model)
