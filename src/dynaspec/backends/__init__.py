"""Model adapters (`dynaspec.core.protocols.ModelAdapter`): the transformers adapter."""

from dynaspec.backends.hf import HFAdapter, as_adapter
from dynaspec.core.protocols import ModelAdapter

__all__ = ["HFAdapter", "ModelAdapter", "as_adapter"]
