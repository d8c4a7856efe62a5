"""Top-1 agreement and mean KL of each quantized 1.5B target with the float32 model, teacher
forced over the same token ids (the figures in docs/design/fast-path.md and quant.py's
INT4_TOLERANCE). Run from the repository root, nothing else running:

    python benchmarks/int4-kernel-avx2-2026-12-02/quality.py [MODE ...]

Texts: the first 320 tokens of four slices of this repository's docs and code. Variants:
the MODEs (`make_fast(static=True, quantize=MODE)`; default int8 and int4) and llama.cpp
on the q4_K_M GGUF (needs llama-cpp-python). Each variant loads the model anew (the fast
copies free the originals' weights)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from dynaspec.backends.static import make_fast
from dynaspec.models import cache
from dynaspec.models.loading import load_model
from dynaspec.models.presets import get_model_preset

TARGET = "qwen2.5-coder-1.5b"
SLICES = [
    ("docs/design/fast-path.md", 2000, 6000),
    ("src/dynaspec/backends/static.py", 3000, 7000),
    ("README.md", 3000, 7000),
    ("src/dynaspec/policies/costs.py", 1000, 5000),
]


def compare(logits_of, sequences, reference) -> str:
    agree, kl = [], []
    for ids, ref in zip(sequences, reference, strict=True):
        out = logits_of(ids)
        agree.append((out.argmax(-1) == ref.argmax(-1)).float().mean().item())
        kl.append(
            F.kl_div(out.log_softmax(-1), ref.log_softmax(-1), log_target=True, reduction="none")
            .sum(-1)
            .mean()
            .item()
        )
    return f"top-1 agreement {np.mean(agree):.4f}, mean KL {np.mean(kl):.4f}"


def main() -> None:
    torch.set_num_threads(2)
    target, tokenizer = load_model(TARGET)
    texts = [Path(path).read_text()[a:b] for path, a, b in SLICES]
    sequences = [torch.tensor(tokenizer(text).input_ids[:320]) for text in texts]
    with torch.no_grad():
        reference = [target(ids[None]).logits[0].float() for ids in sequences]
    del target
    for quantize in sys.argv[1:] or ("int8", "int4"):
        fast = make_fast(load_model(TARGET)[0], static=True, quantize=quantize, release=True)

        def logits_of(ids, fast=fast):
            fast.begin(ids[None], max_length=len(ids) + 64)
            return fast.forward(ids, len(ids)).float()

        print(quantize, compare(logits_of, sequences, reference), flush=True)
        del fast
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama.cpp: llama-cpp-python is not installed")
        return
    gguf = cache.ensure_gguf(get_model_preset(TARGET))
    llama = Llama(model_path=str(gguf), n_ctx=1024, n_threads=2, logits_all=True, verbose=False)

    def llama_logits(ids):
        llama.reset()
        llama.eval(ids.tolist())
        return torch.tensor(np.array(llama.scores[: len(ids)]))

    print("llama.cpp q4_K_M", compare(llama_logits, sequences, reference))


if __name__ == "__main__":
    main()
