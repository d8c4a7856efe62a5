"""The fast methods of `dynaspec bench`, and the llama.cpp anchor.

Fast methods decode with model adapters (dynaspec.backends.static) built from the loaded
transformers target and draft: a static KV cache, bf16 weights prepacked for oneDNN or int8
weights, forwards compiled with `--fast-compile`. Each is lossless relative to its own
target, so its output is compared with that target's own output (`reference`):

    static-target    bf16 static target alone                 vs target (ties only)
    fast-adaptive    bf16 static target + int8 draft, adaptive vs static-target
    int8-target      int8 target alone                         (a quantized model: not compared)
    int8-adaptive    int8 target + int8 draft, adaptive        vs int8-target
    fast-hybrid      bf16 static target + int8 draft + prompt lookup, adaptive  vs static-target
    static-adaptive  static target + static draft, both prepacked in the model's dtype (no
                     quantization: float32 on an AVX2-only CPU), adaptive    vs static-target
    static-hybrid    the same + prompt lookup                               vs static-target
    adaptive-w4a8    the transformers target as loaded + the draft in 4 bits (w4a8, every
                     layer; AVX512-VNNI), adaptive                           vs target
    hybrid-w4a8      the same + prompt lookup                               vs target
    static-adaptive-llamacpp  static target + the draft's GGUF run by llama.cpp, adaptive
                     (needs llama-cpp-python)                                vs static-target
    static-hybrid-llamacpp    the same + prompt lookup                       vs static-target
    int8-adaptive-llamacpp, int8-hybrid-llamacpp: the same on the int8 target  vs int8-target
    int8-hybrid      int8 target + int8 draft + prompt lookup, adaptive        vs int8-target
                     (on AVX512-BF16 both on dynaspec's bf16 int8 kernel)
    llamacpp-target  llama.cpp on the target's GGUF, alone     (its own quantization: not compared)
    llamacpp-prompt-lookup  the same with llama-cpp-python's prompt lookup draft  vs llamacpp-target

The OpenVINO GenAI peers (openvino-target, openvino-spec, ...) are in
dynaspec.eval.openvino_peer; each is compared with its own target alone.

Each variant is built once, on first use, and compiled then (all buckets, for the longest
prompt of the run): build and compile times and the bytes of weights each holds go into the
records, apart from the timed generations.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from time import perf_counter
from typing import Any

from dynaspec.backends.llamacpp import LlamaCppAdapter
from dynaspec.backends.static import FastConfig, StaticAdapter, role_fields, round_up
from dynaspec.errors import ConfigError

LLAMACPP = "llamacpp-target"
LLAMACPP_LOOKUP = "llamacpp-prompt-lookup"
# llama-cpp-python's LlamaPromptLookupDecoding as its documentation shows it (10 tokens a
# round; n-grams up to 2, its default)
LLAMACPP_LOOKUP_TOKENS = 10


@dataclass(frozen=True)
class FastMethod:
    """A decoding method on fast adapters."""

    name: str  # as given to --methods
    target: str  # target variant: "bf16" (prepacked), "int8", "w8a8" or "w4a8"; "eager":
    #             the transformers model as loaded (transformers' forward)
    draft: str | None  # draft variant ("int8", "w4a8", ...), or None: the target alone
    reference: str | None  # the method whose output this one must equal (None: no check)
    description: str  # one line for the README and --help
    lookup: bool = False  # prompt lookup too (the hybrid; the bench's LOOKUP_TOKENS)


FAST_METHODS: dict[str, FastMethod] = {
    method.name: method
    for method in (
        FastMethod("static-target", "bf16", None, "target", "bf16 static-cache target alone"),
        FastMethod(
            "fast-adaptive", "bf16", "int8", "static-target", "bf16 static target, int8 draft"
        ),
        FastMethod("int8-target", "int8", None, None, "int8 static-cache target alone"),
        FastMethod(
            "int8-adaptive", "int8", "int8", "int8-target", "int8 target, int8 draft, adaptive"
        ),
        FastMethod(
            "fast-hybrid", "bf16", "int8", "static-target", "bf16 static, int8 draft + lookup", True
        ),
        # On a CPU with AVX512-BF16 both int8 models run on dynaspec's bf16 int8 kernel
        # (backends/kernels/int8_bf16.py): 1 byte a weight, verification that batches.
        FastMethod("int8-hybrid", "int8", "int8", "int8-target", "int8 both + lookup", True),
        # int8 weights and activations (backends/kernels/w8a8.py, AVX512-VNNI): a target of
        # its own, whose verification of 6-8 tokens costs less than the bf16 int8 kernel's.
        FastMethod("w8a8-target", "w8a8", None, None, "w8a8 static-cache target alone"),
        FastMethod(
            "w8a8-adaptive", "w8a8", "int8", "w8a8-target", "w8a8 target, int8 draft, adaptive"
        ),
        FastMethod("w8a8-hybrid", "w8a8", "int8", "w8a8-target", "w8a8, int8 draft + lookup", True),
        FastMethod(
            "w8a8-hybrid-w4a8", "w8a8", "w4a8", "w8a8-target", "w8a8, w4a8 draft + lookup", True
        ),
        # 4-bit weights and int8 activations (backends/kernels/w4a8.py; finer layers w8a8)
        FastMethod("w4a8-target", "w4a8", None, None, "w4a8 static-cache target alone"),
        FastMethod(
            "w4a8-adaptive", "w4a8", "int8", "w4a8-target", "w4a8 target, int8 draft, adaptive"
        ),
        FastMethod("w4a8-hybrid", "w4a8", "int8", "w4a8-target", "w4a8, int8 draft + lookup", True),
        # The draft in 4 bits too, every layer (FastConfig.int4_everywhere): 0.625 bytes a
        # weight against int8's 1, at a small cost in acceptance.
        FastMethod(
            "w4a8-adaptive-w4a8", "w4a8", "w4a8", "w4a8-target", "w4a8 target and draft, adaptive"
        ),
        FastMethod("w4a8-hybrid-w4a8", "w4a8", "w4a8", "w4a8-target", "w4a8 both + lookup", True),
        # The transformers target as loaded, verifying on transformers' forward as the
        # peers' methods do, with the 4-bit draft: a draft never changes the output.
        FastMethod("adaptive-w4a8", "eager", "w4a8", "target", "transformers target, w4a8 draft"),
        FastMethod(
            "hybrid-w4a8",
            "eager",
            "w4a8",
            "target",
            "transformers target, w4a8 draft + lookup",
            True,
        ),
        FastMethod(
            "fast-hybrid-w4a8",
            "bf16",
            "w4a8",
            "static-target",
            "bf16 static, w4a8 draft + lookup",
            True,
        ),
        # Both models prepacked in the model's dtype: on an AVX2-only CPU (float32) torch's
        # int8 kernel costs more per token than float32 itself.
        FastMethod("static-adaptive", "bf16", "bf16", "static-target", "static target and draft"),
        FastMethod("static-hybrid", "bf16", "bf16", "static-target", "static both + lookup", True),
        # The draft's GGUF run by llama.cpp (backends/llamacpp.py): its quantized kernels
        # are the fastest at one token a forward on a CPU; the output stays the target's.
        FastMethod(
            "static-adaptive-llamacpp", "bf16", "llamacpp", "static-target", "llama.cpp draft"
        ),
        FastMethod(
            "static-hybrid-llamacpp", "bf16", "llamacpp", "static-target", "llama.cpp+lookup", True
        ),
        # The int8 target on dynaspec's own AVX2 kernel (backends/kernels/int8.py, float32
        # activations) with the llama.cpp draft: the fastest pairing on an AVX2-only CPU.
        FastMethod(
            "int8-adaptive-llamacpp", "int8", "llamacpp", "int8-target", "int8, llama.cpp draft"
        ),
        FastMethod(
            "int8-hybrid-llamacpp",
            "int8",
            "llamacpp",
            "int8-target",
            "int8, llama.cpp+lookup",
            True,
        ),
    )
}

# Variant name -> FastConfig fields (compile comes from --fast-compile).
_VARIANTS: dict[str, dict[str, Any]] = {
    # Prepacking does not trace: compiled bf16 forwards keep the model's own weights.
    "bf16": {"prepack": True},
    "int8": {"quantize": "int8", "prepack": True},
    "w8a8": {"quantize": "w8a8", "prepack": True},
    "w4a8": {"quantize": "w4a8", "prepack": True},
}


class FastModels:
    """The fast adapters of a run, built from the transformers target and draft on first use."""

    def __init__(
        self,
        target: Any,
        draft: Any,
        *,
        compile: bool,
        max_length: int,
        draft_gguf: Path | None = None,
        graphs: bool = False,
    ) -> None:
        """`graphs`: the unquantized variants replay CUDA graphs (backends/graphs.py)."""
        self.models = {"target": target, "draft": draft}
        self.compile = compile
        self.graphs = graphs
        self.max_length = max_length  # the longest prompt + max_new_tokens of the run
        self.draft_gguf = draft_gguf  # the draft's GGUF, for the "llamacpp" draft variant
        self.adapters: dict[tuple[str, str], Any] = {}
        self.build_time_s: dict[str, float] = {}  # "target-int8" -> seconds

    def adapter(self, role: str, variant: str) -> Any:
        """The `variant` ("bf16", "int8"; for the draft also "llamacpp"; "eager": the model as
        loaded) of the target or the draft (`role`), compiled."""
        if variant == "eager":
            return self.models[role]
        key = (role, variant)
        if variant == "llamacpp" and key not in self.adapters:
            if self.draft_gguf is None:
                raise ConfigError("the llama.cpp draft methods need the draft's GGUF")
            start = perf_counter()
            context = round_up(self.max_length, 256)  # whole blocks of 256 tokens
            self.adapters[key] = LlamaCppAdapter(self.draft_gguf, context=context)
            self.build_time_s[f"{role}-{variant}"] = perf_counter() - start
        if key not in self.adapters:
            if self.models[role] is None:
                raise ConfigError(f"the fast methods need a {role} model")
            fields = dict(_VARIANTS[variant])
            fields.update(role_fields(draft=role == "draft"))  # as make_fast(draft=...)
            if self.compile:
                fields["prepack"] = False
            graphs = self.graphs and "quantize" not in fields  # the integer kernels: CPU only
            config = FastConfig(compile=self.compile, cuda_graphs=graphs, **fields)
            start = perf_counter()
            adapter = StaticAdapter(self.models[role], config)
            adapter.warmup(self.max_length)  # compiles every bucket now, not while timed
            self.build_time_s[f"{role}-{variant}"] = perf_counter() - start
            self.adapters[key] = adapter
        return self.adapters[key]

    def pair(self, name: str) -> tuple[StaticAdapter, Any]:
        """(target, draft or None) of fast method `name`."""
        method = FAST_METHODS[name]
        target = self.adapter("target", method.target)
        draft = self.adapter("draft", method.draft) if method.draft else None
        return target, draft

    def facts(self, name: str) -> dict[str, Any]:
        """What a record of fast method `name` says about its models besides the timing."""
        target, draft = self.pair(name)
        models = [target] + ([draft] if draft is not None else [])
        return {
            "compile_time_s": round(sum(getattr(m, "compile_time_s", 0.0) for m in models), 3),
            "weight_bytes": sum(_weight_bytes(m) for m in models),
            "fast_models": [_describe(m) for m in models],
        }


def _describe(model: Any) -> str:
    """An adapter's repr (its configuration), or a line for a transformers model as loaded."""
    if hasattr(model, "weight_bytes"):
        return repr(model)
    return f"{type(model).__name__} (as loaded: transformers' forward)"


def _weight_bytes(model: Any) -> int:
    """The bytes of weights an adapter holds, or a transformers model's parameters."""
    if hasattr(model, "weight_bytes"):
        return int(model.weight_bytes())
    return sum(p.numel() * p.element_size() for p in model.parameters())
