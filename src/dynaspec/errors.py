"""Typed errors. Every message says what went wrong and how to fix it."""

from __future__ import annotations


class DynaspecError(Exception):
    """Base class of every error dynaspec raises on purpose.

    `str(error)` tells the fix in Python's words (parameter names). Where the command line
    spells the fix differently (a flag instead of a parameter), `cli_message` holds that
    wording and `for_cli()` returns it.
    """

    def __init__(self, message: str, *, cli_message: str | None = None) -> None:
        super().__init__(message)
        self.cli_message = cli_message  # the same error in the CLI's words, if they differ

    def for_cli(self) -> str:
        """The message as the command line should print it."""
        return self.cli_message or str(self)


class ConfigError(DynaspecError, ValueError):
    """A parameter is out of range or unknown (e.g. threshold outside [0, 1])."""


class InputError(DynaspecError, ValueError):
    """The prompt cannot be decoded as given (empty, batch > 1, too long)."""


class DeviceNotAvailableError(ConfigError):
    """The device asked for is not on this machine (no CUDA GPU, a CPU-only build of torch,
    fewer GPUs than the index); the message names the device to use instead."""


class CpuOnlyOptionError(ConfigError):
    """An option that runs on CPU kernels only (dynaspec's integer kernels, oneDNN, llama.cpp)
    was asked for models on another device; the message names the option to drop."""


class CudaOnlyOptionError(ConfigError):
    """An option that runs on a CUDA GPU only (CUDA graphs) was asked for models elsewhere;
    the message names the option to drop or the device to pass."""


class IncompatibleModelsError(DynaspecError, ValueError):
    """Draft and target cannot be paired (vocabulary, tokenizer or architecture kind)."""


class UnsupportedModelError(DynaspecError, TypeError):
    """The model cannot be used for speculative decoding (e.g. its cache cannot roll back)."""


class NumericalError(DynaspecError, FloatingPointError):
    """A model produced NaN or inf logits."""


class ModelNotAvailableError(DynaspecError, FileNotFoundError):
    """Weights for a preset or path are missing; the message names the install command."""


class CorruptModelFileError(DynaspecError, OSError):
    """A model file or folder is damaged or unreadable: a slice, GGUF or cache folder that
    fails verification (size, magic bytes, sha256, truncation), or a model folder whose
    config.json or weights transformers cannot read."""


class CacheNotWritableError(DynaspecError, OSError):
    """The model cache folder cannot be created or written; the message says how to move it."""


class DataNotAvailableError(DynaspecError, FileNotFoundError):
    """A benchmark prompt package is missing; the message names the pip install command."""


class MissingDependencyError(DynaspecError, ImportError):
    """A package dynaspec needs for this operation is not installed; the message names it."""


class UnsupportedOptionError(DynaspecError, ValueError):
    """A generation option speculative decoding cannot reproduce (beam search, several
    sequences, a padded batch, a processor that runs the model); the message names the
    alternative."""


def one_line(error: BaseException, limit: int = 300) -> str:
    """Another library's error message on one line, at most `limit` characters: for quoting
    it inside one of ours."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


class InsufficientMemoryError(DynaspecError, MemoryError):
    """The machine has less memory available than the models asked for need; the message
    gives both figures and what to change."""
