"""fast="auto": the fastest setting that keeps the target's exact output on this machine.

The choice is made per machine class, from the committed benchmark records (medians over
held-out prompts, against the eager target alone on the same machine):

- CPU with native bf16 (AVX512-BF16 or AMX, which come with AVX512-VNNI) that builds the
  w4a8 kernel: the static path (bf16 weights on the bit-exact kernel), the draft in 4 bits and
  prompt lookup (32) under `adaptive`: 5.54x (benchmarks/speed/avx512-2026-12-06,
  `fast-hybrid-w4a8`); the default before it (the transformers target with the same draft,
  no lookup) ran 1.83-4.62x, and on grounded prompts the static target ran ahead of the
  transformers one with the same draft and lookup on 7 of 8 (benchmarks/HISTORY.md,
  `eager-w4a8-avx512-2026-12-04`), the eighth a different text after a bf16 tie. Without
  the kernel (no C++ compiler) the draft stays in bf16, on the static path too.
- CPU without native bf16 (AVX2 only; models in float32): the static path for target and
  draft (float32 prepacked) and prompt lookup (32): 4.38x, the static pair without lookup
  2.30x (benchmarks/speed/avx2-2026-12-02, `static-hybrid`, `static-adaptive`), where the
  eager pair, the default before, ran 0.98x (HISTORY.md, `qwen2.5-coder-fast-avx2-...`).
  llama.cpp's draft ran as fast there with lookup (1.05x) but needs an optional package: a
  default never depends on what happens to be installed.
- CUDA GPU: nothing beyond `adaptive` with the models as loaded. benchmarks/gpu measured the
  forwards (the static path is launch-bound without CUDA graphs), not a whole generation.

The draft's precision and prompt lookup never change the output; the static path computes
the target's own forward (float32: bit for bit; bf16: the same up to ties between the top two
logits, as any change of the forward's shape gives; every difference in those records was
one). Only `quantize` changes the output, and fast="auto" never sets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dynaspec.errors import ConfigError
from dynaspec.models.devices import DeviceArg, is_cpu
from dynaspec.models.dtype import CpuFeatures, choose_dtype, cpu_features

AUTO = "auto"  # load_pair(fast=...) / load_model_set(fast=...): choose for this machine
FAST_CHOICES = (AUTO, None)  # None: the models as loaded (transformers' defaults)
LOOKUP_TOKENS = 32  # prompt_lookup_num_tokens: adaptive copies only as far as copying pays


@dataclass(frozen=True)
class FastChoice:
    """What fast="auto" chose for this machine, and from which record."""

    machine: str  # the machine class, e.g. "CPU with avx512_bf16 and the w4a8 kernel"
    static: bool  # target and draft on the static path (a static KV cache, prepacked weights)
    draft_quantize: str | None  # "w4a8": the draft's weights in 4 bits; None: its dtype
    prompt_lookup: int | None  # prompt_lookup_num_tokens for generate() (adaptive); None: off
    record: str  # the benchmarks/ folder the choice rests on

    def flags(self) -> str:
        """The same choice as command-line flags ("" when nothing is chosen)."""
        parts = ["--static"] if self.static else []
        if self.draft_quantize:
            parts.append(f"--draft-quantize {self.draft_quantize}")
        if self.prompt_lookup:
            parts.append(f"--prompt-lookup {self.prompt_lookup}")
        return " ".join(parts)

    def generate_options(self) -> dict[str, Any]:
        """generate()'s keywords for the choice: prompt lookup, with the adaptive schedule."""
        if self.prompt_lookup is None:
            return {}
        return {
            "prompt_lookup_num_tokens": self.prompt_lookup,
            "num_assistant_tokens_schedule": "adaptive",
        }

    def without_static(self, why: str) -> FastChoice:
        """The same choice off the static path (memory, architecture), saying why."""
        return FastChoice(self.machine, False, self.draft_quantize, self.prompt_lookup, why)


def w4a8_builds() -> bool:
    """Whether dynaspec's w4a8 kernel (and the w8a8 one it leans on) builds and runs here
    (an AVX512-VNNI CPU and a C++ compiler; built once, then cached)."""
    from dynaspec.backends.kernels.registry import KERNELS

    return bool(KERNELS["w4a8"].available() and KERNELS["w8a8"].available())


def choose_fast(
    device: DeviceArg = None,
    dtype: str | torch.dtype | None = None,
    *,
    features: CpuFeatures | None = None,
    w4a8: bool | None = None,
) -> FastChoice:
    """The fastest setting that keeps the target's exact output for models in `dtype` on
    `device` (module docstring: the rule and its records). `features` and `w4a8` (whether
    the w4a8 kernel builds) default to this machine's."""
    if not is_cpu(device):
        return FastChoice("a CUDA GPU", False, None, None, "benchmarks/gpu (forwards only)")
    chosen = choose_dtype(dtype, "cpu").dtype
    if chosen == torch.bfloat16:
        features = cpu_features() if features is None else features
        native = " and ".join(features.native_bf16) or "no native bf16"
        if features.native_bf16 and (w4a8_builds() if w4a8 is None else w4a8):
            record = "benchmarks/speed/avx512-2026-12-06"
            return FastChoice(f"a CPU with {native}", True, "w4a8", LOOKUP_TOKENS, record)
        record = "benchmarks/speed/avx512-2026-12-06, the static path"
        machine = f"a CPU with {native}, without the w4a8 kernel"
        return FastChoice(machine, True, None, LOOKUP_TOKENS, record)
    if chosen == torch.float32:
        record = "benchmarks/speed/avx2-2026-12-02"
        return FastChoice("a CPU in float32", True, None, LOOKUP_TOKENS, record)
    name = str(chosen).removeprefix("torch.")
    return FastChoice(f"a CPU in {name}", False, None, None, "no record for this dtype")


def check_fast(fast: str | None, **asked: Any) -> None:
    """ConfigError unless `fast` is "auto" or None, and unless, with "auto", the fast-path
    options in `asked` (static=, compile=, quantize=, draft_quantize=, cuda_graphs=) are all
    unset:
    fast="auto" sets them itself."""
    if fast not in FAST_CHOICES:
        raise ConfigError(f"unknown fast={fast!r}: pass fast='auto' or fast=None")
    given = [f"{name}={value!r}" for name, value in asked.items() if value]
    if fast == AUTO and given:
        raise ConfigError(
            f"fast='auto' chooses the fast path itself, and {' and '.join(given)} were "
            "given too: drop them, or pass fast=None to set them yourself"
        )
