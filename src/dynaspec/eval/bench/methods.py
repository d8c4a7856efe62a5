"""The methods `dynaspec bench` compares: one `MethodSpec` each in `METHOD_SPECS`.

``target`` (dynaspec, draft=None), ``constant`` (k=5), ``heuristic`` (start 5, +2/-1),
``dynamic`` (20, confidence 0.4), ``adaptive`` (cost-aware, a fresh policy per prompt),
``adaptive-warm`` (one AdaptivePolicy reused over the whole run, so what it learned on a
prompt carries to the next; its warm-up uses a separate object), ``oracle`` (drafts up to
the first disagreement with the target-alone output: the best any lookahead policy can do
with this draft), ``prompt-lookup`` (no draft model: copies from the prompt and the text
so far, up to 32 tokens a round, as many as the cost-aware rule finds worth it),
``hybrid`` (the draft model and prompt lookup together, adaptive), ``hf-target``
(transformers greedy, no assistant), ``hf-heuristic`` and ``hf-dynamic`` (transformers'
assisted generation, see ``dynaspec.eval.hf_peer``), ``hf-prompt-lookup`` (transformers'
prompt lookup, ``prompt_lookup_num_tokens=10`` as in transformers' documentation), and
``hf-prompt-lookup-32`` (the same with dynaspec's cap of 32: what a larger fixed cap alone
does);
the fast methods ``static-target``, ``fast-adaptive``, ``int8-target``, ``int8-adaptive``
and ``fast-hybrid``/``int8-hybrid`` (with prompt lookup), the int8
weights-and-activations ``w8a8-target``/``w8a8-adaptive``/``w8a8-hybrid`` and their 4-bit
``w4a8-*``
(static KV cache, prepacked or int8 weights, see ``dynaspec.eval.bench.fast``) and
``llamacpp-target`` (llama.cpp on the target's GGUF, ``dynaspec.eval.llamacpp_peer``) and
``llamacpp-prompt-lookup`` (the same with llama-cpp-python's prompt lookup, 10 tokens); the
OpenVINO GenAI peers ``openvino-target``, ``openvino-spec``, ``openvino-spec-confidence``,
``openvino-prompt-lookup`` (int8 weights) and their ``-fp32`` variants
(``dynaspec.eval.openvino_peer``). A peer's output is compared with its own target alone's.

A new method is one `MethodSpec` in `METHOD_SPECS`: its run function
(``dynaspec.eval.bench.runner``) and that function's settings, and, for a column of the
main table, its `Column`. Its place in `METHOD_SPECS` is its place in the records, tables
and plots. A new fast variant is one `FastMethod` in ``dynaspec.eval.bench.fast``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from dynaspec.errors import ConfigError
from dynaspec.eval.bench.fast import FAST_METHODS, LLAMACPP, LLAMACPP_LOOKUP
from dynaspec.eval.bench.measurement import MethodOutput
from dynaspec.eval.bench.runner import (
    ADAPTIVE,
    LOOKUP_TOKENS,
    MethodCall,
    MethodRunner,
    run_adaptive_policy,
    run_dynaspec,
    run_fast,
    run_hf,
    run_llamacpp,
    run_openvino,
    run_oracle,
)
from dynaspec.eval.hf_peer import HF_DYNAMIC, HF_DYNAMIC_FIXED, HF_HEURISTIC
from dynaspec.eval.openvino_peer import OPENVINO_METHODS

RunFunction = Callable[..., MethodOutput]  # (runner, call, **settings)


@dataclass(frozen=True)
class Column:
    """A speedup column of the main table."""

    header: str
    position: int  # columns are sorted by it (the table's order need not be METHOD_SPECS')


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method of the benchmark, with how it runs and where it is reported."""

    name: str  # as given to --methods and written in the records
    family: str  # "dynaspec" | "hf" | "fast" | "llamacpp" | "openvino" (PEER_FAMILIES)
    speculative: bool  # uses the draft (False: the target decodes alone)
    description: str  # one line for --help and the README
    run: RunFunction  # called as run(runner, call, **settings)
    settings: Mapping[str, Any] = field(default_factory=dict)
    column: Column | None = None  # its speedup column in the main table (None: none)
    reference: str | None = "target"  # the method whose output it must equal (None: none)
    warmup_settings: Mapping[str, Any] | None = None  # the untimed warm-up's, if not these


_DYNAMIC = {
    "num_assistant_tokens": 20,
    "assistant_confidence_threshold": 0.4,
    "num_assistant_tokens_schedule": "dynamic",
}
_LOOKUP = {"prompt_lookup_num_tokens": LOOKUP_TOKENS, **ADAPTIVE}

METHOD_SPECS: tuple[MethodSpec, ...] = (
    MethodSpec("target", "dynaspec", False, "dynaspec loop, target alone (the baseline)",
               run_dynaspec, {"draft": None}),
    MethodSpec("constant", "dynaspec", True, "dynaspec, constant lookahead 5",
               run_dynaspec,
               {"num_assistant_tokens": 5, "num_assistant_tokens_schedule": "constant"},
               Column("constant", 2)),
    MethodSpec("heuristic", "dynaspec", True, "dynaspec, heuristic schedule (start 5, +2/-1)",
               run_dynaspec,
               {"num_assistant_tokens": 5, "num_assistant_tokens_schedule": "heuristic"},
               Column("heuristic", 0)),
    MethodSpec("dynamic", "dynaspec", True, "dynaspec, dynamic (up to 20, confidence 0.4)",
               run_dynaspec, _DYNAMIC, Column("dynamic", 1)),
    MethodSpec("adaptive", "dynaspec", True, "dynaspec, cost-aware adaptive, fresh per prompt",
               run_dynaspec, ADAPTIVE, Column("adaptive", 3)),
    MethodSpec("adaptive-warm", "dynaspec", True,
               "dynaspec, adaptive, one policy over the whole run",
               run_adaptive_policy, {"warm": True}, Column("adaptive-warm", 4),
               warmup_settings={"warm": False}),  # the warm-up does not teach the run's policy
    MethodSpec("oracle", "dynaspec", True, "dynaspec, oracle lookahead (first disagreement)",
               run_oracle, {}, Column("oracle", 5)),
    MethodSpec("prompt-lookup", "dynaspec", False, "dynaspec, prompt lookup alone (32), adaptive",
               run_dynaspec, {"draft": None, **_LOOKUP}, Column("prompt lookup", 6)),
    MethodSpec("hybrid", "dynaspec", True, "dynaspec, draft model + prompt lookup (32), adaptive",
               run_dynaspec, _LOOKUP, Column("hybrid", 7)),
    MethodSpec("hf-target", "hf", False, "transformers generate(), greedy, no assistant", run_hf),
    MethodSpec("hf-heuristic", "hf", True, "transformers assisted, heuristic (5, +2/-1)",
               run_hf, {"assist": HF_HEURISTIC}, Column("HF heuristic", 8)),
    MethodSpec("hf-dynamic", "hf", True,
               "transformers assisted, default dynamic (20, 0.4; tuned with scikit-learn)",
               run_hf, {"assist": HF_DYNAMIC}, Column("HF dynamic", 9)),
    MethodSpec("hf-dynamic-0.4", "hf", True,
               "transformers assisted, dynamic with the threshold kept at 0.4 (no tuning)",
               run_hf, {"assist": HF_DYNAMIC_FIXED}),
    # transformers' prompt lookup as its documentation shows (10 tokens), and dynaspec's cap
    MethodSpec("hf-prompt-lookup", "hf", False, "transformers prompt lookup (10 tokens)",
               run_hf, {"prompt_lookup": 10}, Column("HF prompt lookup", 10)),
    MethodSpec("hf-prompt-lookup-32", "hf", False, "transformers prompt lookup (32 tokens)",
               run_hf, {"prompt_lookup": 32}, Column("HF prompt lookup 32", 11)),
    *(
        MethodSpec(m.name, "fast", m.draft is not None, m.description, run_fast,
                   reference=m.reference)
        for m in FAST_METHODS.values()
    ),
    MethodSpec(LLAMACPP, "llamacpp", False, "llama.cpp, the target's GGUF alone", run_llamacpp,
               reference=None),
    MethodSpec(LLAMACPP_LOOKUP, "llamacpp", False, "llama.cpp + its prompt lookup (10 tokens)",
               run_llamacpp, {"lookup": True}, reference=LLAMACPP),
    *(
        MethodSpec(m.name, "openvino", m.pipeline == "draft", m.description, run_openvino,
                   reference=m.reference)
        for m in OPENVINO_METHODS.values()
    ),
)  # fmt: skip
# Other engines: each output is compared with its own target alone's (matches_target), never
# classified with dynaspec's target and never a BUG of dynaspec's.
PEER_FAMILIES: tuple[str, ...] = ("llamacpp", "openvino")
SPECS: dict[str, MethodSpec] = {spec.name: spec for spec in METHOD_SPECS}
METHODS: tuple[str, ...] = tuple(spec.name for spec in METHOD_SPECS)
# What --methods runs by default: every method on the loaded pair as it is (the fast methods
# build more models, llama.cpp needs its extra: name them to run them).
DEFAULT_METHODS: tuple[str, ...] = tuple(
    spec.name for spec in METHOD_SPECS if spec.family in ("dynaspec", "hf")
)
# (method, header) of the main table's speedup columns, in table order
SPEEDUP_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (spec.name, spec.column.header)
    for spec in sorted(
        (spec for spec in METHOD_SPECS if spec.column), key=lambda s: s.column.position
    )
)
BASELINE = "target"
WARMUP_TOKENS = 8  # new tokens of each untimed warm-up generation
WARMUP_PROMPT_TOKENS = 32  # prompt tokens of the warm-up generations


def run_method(
    runner: MethodRunner,
    name: str,
    input_ids: torch.Tensor,
    reference: Sequence[int],
    *,
    warmup: bool = False,
) -> MethodOutput:
    """Method `name` on one prompt (`warmup`: with its warm-up settings)."""
    spec = SPECS.get(name)
    if spec is None:
        raise ConfigError(f"unknown method {name!r}")
    settings = spec.settings
    if warmup and spec.warmup_settings is not None:
        settings = spec.warmup_settings
    return spec.run(runner, MethodCall(name, input_ids, reference), **settings)


def warm_up(runner: MethodRunner, input_ids: torch.Tensor, methods: Sequence[str]) -> None:
    """One short untimed generation per method."""
    saved = runner.max_new_tokens
    runner.max_new_tokens = min(WARMUP_TOKENS, saved)
    try:
        reference = run_method(runner, BASELINE, input_ids, (), warmup=True).output_ids
        for name in methods:
            if name != BASELINE:
                run_method(runner, name, input_ids, reference, warmup=True)
    finally:
        runner.max_new_tokens = saved


def reference_model(runner: MethodRunner, name: str) -> Any:
    """The model whose output method `name` must equal (for classifying a mismatch)."""
    reference = SPECS[name].reference
    if runner.fast is not None and reference in FAST_METHODS:
        return runner.fast.pair(reference)[0]
    return runner.target


def parse_methods(text: str) -> tuple[str, ...]:
    """'dynamic,hf-dynamic' -> ("dynamic", "hf-dynamic"); unknown names raise ConfigError."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise ConfigError(
            f"unknown method(s) {', '.join(map(repr, unknown))}: choose from {', '.join(METHODS)}"
        )
    if not names:
        raise ConfigError(f"--methods is empty: choose from {', '.join(METHODS)}")
    return tuple(dict.fromkeys(names))


def method_order(methods: Sequence[str], prompt_index: int) -> list[str]:
    """The run order of `methods` on prompt number `prompt_index`.

    The list rotated left by `prompt_index` places (the baseline included, so no method
    always runs first, right after the previous prompt, or last), except that the oracle,
    which needs the target-alone output, is moved to run right after the baseline when the
    rotation put it before.
    """
    shift = prompt_index % len(methods) if methods else 0
    order = [*methods[shift:], *methods[:shift]]
    if "oracle" in order and BASELINE in order and order.index("oracle") < order.index(BASELINE):
        order.remove("oracle")
        order.insert(order.index(BASELINE) + 1, "oracle")
    return order


def runnable_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """The methods to run: the baseline ("target") first, then `methods` without it, then
    any method another one must be compared with (a fast method's own target alone)."""
    chosen = [BASELINE, *(name for name in methods if name != BASELINE)]
    for name in list(chosen):
        reference = SPECS[name].reference
        if reference is not None and reference not in chosen:
            chosen.append(reference)
    return tuple(chosen)
