"""A draft run by llama.cpp: a GGUF model behind dynaspec's `ModelAdapter`.

A draft never changes the output (the target checks every token), so any engine may draft,
and the best one is the fastest at one token a forward. On a CPU that is llama.cpp on a
quantized GGUF: its kernels read 4-6 bits a weight where torch reads 16 or 32. The adapter
feeds tokens with `Llama.eval` (its own KV cache), reads the last token's logits, and rolls
back by moving llama-cpp-python's token count (its next `eval` drops the cache past it).
Drafts only: one row of logits per forward (a target needs a row per verified token). In a
batch or the server each row drafts with a fork of its own (`fork`: another llama.cpp context
over the same GGUF, whose weights the OS maps once).

llama-cpp-python builds llama.cpp from source: `pip install "dynaspec[llamacpp]"` (about 5
minutes on 2 cores; `CMAKE_ARGS="-DGGML_NATIVE=ON"` for the CPU it runs on).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from dynaspec.errors import InputError, MissingDependencyError, UnsupportedOptionError

INSTALL_HINT = (
    'pip install "dynaspec[llamacpp]" (builds llama.cpp from source, about 5 minutes on 2 '
    'cores; set CMAKE_ARGS="-DGGML_NATIVE=ON" to build for this CPU)'
)


def open_gguf(
    path: str | os.PathLike[str], *, context: int, threads: int, purpose: str, **options: Any
) -> Any:
    """llama-cpp-python's `Llama` on the GGUF at `path`, quiet, with `threads` for decoding
    and prompt batches; MissingDependencyError naming `purpose` and the install command."""
    try:
        from llama_cpp import Llama
    except ImportError as error:
        raise MissingDependencyError(f"{purpose} needs llama-cpp-python: {INSTALL_HINT}") from error
    return Llama(
        model_path=os.fspath(path),
        n_ctx=context,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        **options,
    )


class LlamaCppAdapter:
    """A GGUF draft run by llama.cpp (`core.protocols.ModelAdapter`, one logits row a forward)."""

    is_encoder_decoder = False

    def __init__(
        self, gguf_path: str | os.PathLike[str], *, context: int = 4096, threads: int | None = None
    ) -> None:
        self.path = os.fspath(gguf_path)
        self.threads = threads or torch.get_num_threads()
        self.llm: Any = open_gguf(
            self.path,
            context=context,
            threads=self.threads,
            purpose="a draft run by llama.cpp",
            logits_all=False,
        )
        self.vocab_size: int = self.llm.n_vocab()
        self.context = context
        self.max_length: int | None = context
        self.device = torch.device("cpu")

    def __repr__(self) -> str:
        return f"LlamaCppAdapter({os.path.basename(self.path)}, context={self.max_length})"

    @property
    def num_cached(self) -> int:
        return int(self.llm.n_tokens)

    def fork(self) -> LlamaCppAdapter:
        """Another llama.cpp context over the same GGUF, with a KV cache of its own."""
        return LlamaCppAdapter(self.path, context=self.context, threads=self.threads)

    def weight_bytes(self) -> int:
        """The GGUF's size: what a decoding forward reads (backends/weights.py)."""
        return os.path.getsize(self.path)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        if max_length is not None and self.max_length is not None and max_length > self.max_length:
            raise InputError(
                f"the sequence may reach {max_length} tokens, past the llama.cpp draft's "
                f"context of {self.max_length}: build LlamaCppAdapter(..., context={max_length})"
            )
        self.llm.reset()
        return input_ids[0]

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Feed (n,) tokens; the (1, V) logits after the last one."""
        if num_logits != 1:
            raise UnsupportedOptionError(
                "a llama.cpp model drafts only (one row of logits a forward): pass it as "
                "the draft, and the target as a transformers model or a fast adapter"
            )
        self.llm.eval([int(token) for token in new_tokens.tolist()])
        row = np.ctypeslib.as_array(self.llm._ctx.get_logits_ith(-1), shape=(self.vocab_size,))
        return torch.from_numpy(row.copy()).view(1, -1)  # (1, V)

    def crop(self, num_tokens: int) -> None:
        """Keep the first `num_tokens` tokens: the next `eval` drops the cache past them."""
        self.llm.n_tokens = min(num_tokens, int(self.llm.n_tokens))
