"""Sliding-window models (Mistral, Gemma2, Gemma3, Qwen2 with use_sliding_window, ...) with
a cache that rolls back exactly.

transformers' `DynamicSlidingWindowLayer` keeps only the newest `sliding_window - 1` keys and
values of a layer, so once a sequence is longer than its window, rejected draft tokens
cannot be removed again (`crop` raises). `activate_past_recording()` makes it keep every
new state until the next `crop`, which then removes the rejected tokens and trims the layer
back to its window: exactly what the loop's rollback needs, and what transformers' own
assisted generation uses. `recording_cache` builds such a cache before the first forward
(the first forward already holds draft tokens that may be rejected); a transformers release
without it is refused before any token is produced.
"""

from __future__ import annotations

from typing import Any

from dynaspec.errors import UnsupportedModelError


def sliding_window(model: Any) -> int | None:
    """The attention window of `model`'s text config, if any of its layers uses one."""
    config = model.config
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    window = getattr(text, "sliding_window", None)
    if not isinstance(window, int) or window <= 0:
        return None
    layer_types = getattr(text, "layer_types", None)
    if layer_types is not None and not any("sliding" in str(kind) for kind in layer_types):
        return None  # a window in the config that no layer uses (Qwen2 by default)
    return window


def recording_cache(model: Any, max_length: int | None = None) -> Any | None:
    """A transformers `DynamicCache` for `model` that can roll back past its sliding window,
    or None when the model has no sliding window (the model then makes its own cache).
    Without transformers' past recording, a sequence of at most `max_length` tokens that
    stays inside the window needs none; a longer one is refused."""
    window = sliding_window(model)
    if window is None:
        return None
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    layers = getattr(cache, "layers", [])
    sliding = [layer for layer in layers if getattr(layer, "is_sliding", False)]
    if not sliding:
        return None
    if not all(hasattr(layer, "activate_past_recording") for layer in sliding):
        if max_length is not None and max_length < window:
            return None  # the sequence never leaves the window: no rollback past it
        raise UnsupportedModelError(
            f"{type(model).__name__} attends over a sliding window of {window} tokens, and "
            "this transformers release cannot roll its cache back past the window: upgrade "
            "transformers (a 5.x release with DynamicCache.activate_past_recording), keep "
            f"the prompt + max_new_tokens under {window} tokens, or use a model without a "
            "sliding window"
        )
    cache.activate_past_recording()
    return cache
