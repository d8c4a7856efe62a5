"""Typed errors. Every message says what went wrong and how to fix it."""

from __future__ import annotations


class DynaspecError(Exception):
    """Base class of every error dynaspec raises on purpose."""


class ConfigError(DynaspecError, ValueError):
    """A parameter is out of range or unknown (e.g. threshold outside [0, 1])."""


class InputError(DynaspecError, ValueError):
    """The prompt cannot be decoded as given (empty, batch > 1, too long)."""


class IncompatibleModelsError(DynaspecError, ValueError):
    """Draft and target cannot be paired (vocabulary, tokenizer or architecture kind)."""


class UnsupportedModelError(DynaspecError, TypeError):
    """The model cannot be used for speculative decoding (e.g. its cache cannot roll back)."""


class NumericalError(DynaspecError, FloatingPointError):
    """A model produced NaN or inf logits."""


class ModelNotAvailableError(DynaspecError, FileNotFoundError):
    """Weights for a preset or path are missing; the message names the install command."""


class CorruptModelFileError(DynaspecError, OSError):
    """A joined or cached model file failed verification (size, magic bytes, sha256)."""


class DataNotAvailableError(DynaspecError, FileNotFoundError):
    """A benchmark prompt package is missing; the message names the pip install command."""


class MissingDependencyError(DynaspecError, ImportError):
    """A package dynaspec needs for this operation is not installed; the message names it."""


class UnsupportedOptionError(DynaspecError, ValueError):
    """A generation option speculative decoding cannot reproduce (beam search, several
    sequences, a padded batch, a processor that runs the model); the message names the
    alternative."""
