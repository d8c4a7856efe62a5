"""Model adapters (`dynaspec.core.protocols.ModelAdapter`): the transformers adapter, and the
fast one (static KV cache, prepacked or quantized weights, compiled forwards)."""

from dynaspec.backends.hf import HFAdapter, as_adapter
from dynaspec.backends.static import FastConfig, StaticAdapter, make_fast
from dynaspec.core.protocols import ModelAdapter

__all__ = ["FastConfig", "HFAdapter", "ModelAdapter", "StaticAdapter", "as_adapter", "make_fast"]
