"""What a model's decoding forward reads: its weights' bytes, for the draft's cost before it
has been timed (a decoding step reads every weight once, so the draft's step costs about
its bytes over the target's)."""

from __future__ import annotations

from typing import Any

import torch

from dynaspec.backends.hf import HFAdapter


def weight_bytes(model: Any) -> int | None:
    """Bytes of the weights of a transformers model, an adapter of one, a fast adapter (tied
    weights once) or any adapter that tells (`weight_bytes()`: llama.cpp's, its GGUF's
    size); None for anything else (a scripted model)."""
    if callable(getattr(model, "weight_bytes", None)):  # StaticAdapter, LlamaCppAdapter
        return model.weight_bytes()
    if isinstance(model, HFAdapter):
        model = model.model
    if not isinstance(model, torch.nn.Module):
        return None
    return sum(p.numel() * p.element_size() for p in model.parameters()) or None


def draft_cost_ratio(target: Any, draft: Any) -> float | None:
    """The draft's weight bytes over the target's (None when either is unknown)."""
    target_bytes, draft_bytes = weight_bytes(target), weight_bytes(draft)
    if not target_bytes or not draft_bytes:
        return None
    return draft_bytes / target_bytes
