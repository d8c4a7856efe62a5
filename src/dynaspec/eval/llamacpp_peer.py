"""llama.cpp's target alone, through llama-cpp-python: the absolute anchor of the benchmark.

A CPU user would otherwise pick llama.cpp, so `dynaspec bench` runs it on the same GGUF
(the preset's joined file) and the same prompt token ids, greedy, and times each call from
outside like every other method. Its weights are the GGUF's own quantization (q4_k_m for the
default pair), so its output is not expected to equal the bf16 target's.

With `prompt_lookup=N` the same model drafts with llama-cpp-python's
`LlamaPromptLookupDecoding(num_pred_tokens=N)` (llamacpp-prompt-lookup): greedy and lossless
up to the numerics of a forward over several tokens, so its output is compared with
llamacpp-target's. A draft makes llama-cpp-python keep the logits of every position
(`logits_all`), which costs the target alone nothing when it has a model of its own.

llama-cpp-python builds llama.cpp from source at install: `pip install "dynaspec[llamacpp]"`
with `CMAKE_ARGS="-DGGML_NATIVE=ON"` for the CPU it runs on (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch

from dynaspec.backends.llamacpp import INSTALL_HINT, open_gguf
from dynaspec.errors import MissingDependencyError


@dataclass(frozen=True)
class LlamaCppResult:
    """One greedy llama.cpp generation."""

    new_ids: list[int]  # generated token ids (EOS included when it came)
    wall_time_s: float  # the call, prompt evaluation included


class LlamaCppPeer:
    """A llama.cpp model on a GGUF file, decoding one prompt at a time, greedy."""

    def __init__(
        self,
        gguf_path: str | os.PathLike[str],
        threads: int,
        context: int = 4096,
        *,
        prompt_lookup: int | None = None,
    ):
        method = "llamacpp-prompt-lookup" if prompt_lookup else "llamacpp-target"
        try:
            from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        except ImportError as error:
            raise MissingDependencyError(
                f"the {method} method needs llama-cpp-python: {INSTALL_HINT}"
            ) from error
        self.path = os.fspath(gguf_path)
        self.threads = threads
        self.prompt_lookup = prompt_lookup  # tokens drafted a round, None: the target alone
        draft = LlamaPromptLookupDecoding(num_pred_tokens=prompt_lookup) if prompt_lookup else None
        purpose = f"the {method} method"
        self.model: Any = open_gguf(
            self.path, context=context, threads=threads, purpose=purpose, draft_model=draft
        )

    def generate(
        self, input_ids: torch.Tensor, max_new_tokens: int, eos_token_ids: Sequence[int]
    ) -> LlamaCppResult:
        """Greedy decoding of `max_new_tokens` after the (1, T) prompt; stops after an EOS."""
        prompt = [int(token) for token in input_ids[0]]
        new_ids: list[int] = []
        start = perf_counter()
        self.model.reset()  # no prompt prefix reused from an earlier call
        for token in self.model.generate(
            prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True
        ):
            new_ids.append(int(token))
            if token in eos_token_ids or len(new_ids) >= max_new_tokens:
                break
        return LlamaCppResult(new_ids, perf_counter() - start)
