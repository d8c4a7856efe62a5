"""Draft sources behind one seam (`dynaspec.core.protocols.Drafter`)."""

from dynaspec.drafters.draft_model import ModelDrafter

__all__ = ["ModelDrafter"]
