"""Loading a transformers folder or hub id quietly, with typed errors that say the fix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch

from dynaspec.errors import (
    CorruptModelFileError,
    MissingDependencyError,
    ModelNotAvailableError,
    one_line,
)
from dynaspec.models.devices import DeviceArg, resolve_device
from dynaspec.models.quiet import no_progress_bars

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def _load_folder(
    folder: Path | str, dtype: torch.dtype | str, device: DeviceArg = None, *, fix: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a transformers folder or hub id, quietly; what transformers cannot read raises
    CorruptModelFileError ending in `fix`, a missing package MissingDependencyError."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )

    try:
        with no_progress_bars():
            config = AutoConfig.from_pretrained(folder)
            # Encoder-decoder checkpoints (T5, BART, ...) load as seq2seq models.
            auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
            model = auto.from_pretrained(folder, dtype=dtype)
            tokenizer = AutoTokenizer.from_pretrained(folder)
    except ImportError as error:
        raise MissingDependencyError(
            f"loading {folder} needs a package that is not installed: {one_line(error)}"
        ) from error
    except Exception as error:  # transformers raises OSError, ValueError, TypeError, ...
        raise CorruptModelFileError(
            f"transformers could not load {folder} ({type(error).__name__}: "
            f"{one_line(error)}); {fix}"
        ) from error
    model.eval()
    target_device = resolve_device(device)
    if target_device is not None:
        model.to(target_device)
    return model, tokenizer


def _load_cached_folder(
    folder: Path, dtype: torch.dtype, device: DeviceArg = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a cache folder; a damaged one raises CorruptModelFileError saying to delete it."""
    return _load_folder(
        folder, dtype, device, fix="delete that folder and load again to rebuild it"
    )


def _looks_like_hub_id(text: str) -> bool:
    """`owner/name` with no path-like start and no .gguf suffix."""
    parts = text.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not text.startswith((".", "~"))
        and not text.endswith(".gguf")
    )


def _load_from_hub(
    model_id: str, dtype: torch.dtype | str, device: DeviceArg = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        fix = "check the id, or use a preset or a local folder"
        return _load_folder(model_id, dtype, device, fix=fix)
    except CorruptModelFileError as error:
        if not isinstance(error.__cause__, OSError):
            raise
        raise ModelNotAvailableError(
            f"could not load {model_id!r} from the Hugging Face hub "
            f"({one_line(error.__cause__)}); check the id "
            "and the network, or use a preset (`dynaspec models`) or a local folder"
        ) from error
