"""The methods `dynaspec bench` compares, and how one method runs on one prompt.

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
the fast methods ``static-target``, ``fast-adaptive``, ``int8-target``, ``int8-adaptive``,
their int4-draft variants and ``fast-hybrid``/``int8-hybrid-int4`` (with prompt lookup)
(static KV cache, prepacked or int8 weights, see ``dynaspec.eval.bench.fast``) and
``llamacpp-target`` (llama.cpp on the target's GGUF, ``dynaspec.eval.llamacpp_peer``).

A new method: a `MethodSpec` in `METHOD_SPECS` (its place there is its place in the
records, tables and plots), a branch in `MethodRunner.run`, and, for a column of the main
table, an entry in `dynaspec.eval.bench.report.SPEEDUP_COLUMNS`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

import torch

from dynaspec.errors import ConfigError
from dynaspec.eval.bench.fast import FAST_METHODS, LLAMACPP, FastModels
from dynaspec.eval.hf_peer import (
    HF_DYNAMIC,
    HF_HEURISTIC,
    NEUTRAL_GREEDY_KWARGS,
    HFAssistConfig,
    HFPeer,
)
from dynaspec.generation import generate
from dynaspec.policies import AdaptivePolicy, OraclePolicy


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method of the benchmark."""

    name: str  # as given to --methods and written in the records
    family: str  # "dynaspec" | "hf" | "fast" | "llamacpp"
    speculative: bool  # uses the draft (False: the target decodes alone)
    description: str  # one line for --help and the README
    reference: str | None = "target"  # the method whose output it must equal (None: none)


METHOD_SPECS: tuple[MethodSpec, ...] = (
    MethodSpec("target", "dynaspec", False, "dynaspec loop, target alone (the baseline)"),
    MethodSpec("constant", "dynaspec", True, "dynaspec, constant lookahead 5"),
    MethodSpec("heuristic", "dynaspec", True, "dynaspec, heuristic schedule (start 5, +2/-1)"),
    MethodSpec("dynamic", "dynaspec", True, "dynaspec, dynamic (up to 20, confidence 0.4)"),
    MethodSpec("adaptive", "dynaspec", True, "dynaspec, cost-aware adaptive, fresh per prompt"),
    MethodSpec(
        "adaptive-warm", "dynaspec", True, "dynaspec, adaptive, one policy over the whole run"
    ),
    MethodSpec("oracle", "dynaspec", True, "dynaspec, oracle lookahead (first disagreement)"),
    MethodSpec("prompt-lookup", "dynaspec", False, "dynaspec, prompt lookup alone (32), adaptive"),
    MethodSpec("hybrid", "dynaspec", True, "dynaspec, draft model + prompt lookup (32), adaptive"),
    MethodSpec("hf-target", "hf", False, "transformers generate(), greedy, no assistant"),
    MethodSpec("hf-heuristic", "hf", True, "transformers assisted, heuristic (5, +2/-1)"),
    MethodSpec("hf-dynamic", "hf", True, "transformers assisted, default dynamic (20, 0.4)"),
    MethodSpec("hf-prompt-lookup", "hf", False, "transformers prompt lookup (10 tokens)"),
    MethodSpec("hf-prompt-lookup-32", "hf", False, "transformers prompt lookup (32 tokens)"),
    *(
        MethodSpec(m.name, "fast", m.draft is not None, m.description, m.reference)
        for m in FAST_METHODS.values()
    ),
    MethodSpec(LLAMACPP, "llamacpp", False, "llama.cpp, the target's GGUF alone", None),
)
SPECS: dict[str, MethodSpec] = {spec.name: spec for spec in METHOD_SPECS}
METHODS: tuple[str, ...] = tuple(spec.name for spec in METHOD_SPECS)
# What --methods runs by default: every method on the loaded pair as it is (the fast methods
# build more models, llama.cpp needs its extra: name them to run them).
DEFAULT_METHODS: tuple[str, ...] = tuple(
    spec.name for spec in METHOD_SPECS if spec.family in ("dynaspec", "hf")
)
BASELINE = "target"
HF_ASSIST: dict[str, HFAssistConfig] = {"hf-heuristic": HF_HEURISTIC, "hf-dynamic": HF_DYNAMIC}
# The settings of every adaptive method (model draft, prompt lookup, hybrid, fast methods).
ADAPTIVE: dict[str, Any] = {"num_assistant_tokens": 20, "num_assistant_tokens_schedule": "adaptive"}
WARMUP_TOKENS = 8  # new tokens of each untimed warm-up generation
WARMUP_PROMPT_TOKENS = 32  # prompt tokens of the warm-up generations
# prompt_lookup_num_tokens: dynaspec's methods copy up to 32 tokens a round (the adaptive rule
# copies only as far as it pays); transformers' as its documentation shows (10), and 32.
LOOKUP_TOKENS = 32
HF_LOOKUP_TOKENS = {"hf-prompt-lookup": 10, "hf-prompt-lookup-32": 32}


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


class MethodRunner:
    """Runs one method on one prompt and measures it."""

    def __init__(
        self,
        target: Any,
        draft: Any,
        max_new_tokens: int,
        eos_token_id: int | list[int] | None,
        pad_token_id: int | None,
    ) -> None:
        self.target = target
        self.draft = draft
        self.max_new_tokens = max_new_tokens
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.peer = HFPeer(target, draft)
        self.warm_policy: Any = None
        self.fast: FastModels | None = None  # set by the caller when fast methods run
        self.llamacpp: Any = None  # a LlamaCppPeer, set by the caller for llamacpp-target

    def warm_up(self, input_ids: torch.Tensor, methods: Sequence[str]) -> None:
        """One short untimed generation per method (adaptive-warm on a throwaway policy)."""
        saved, self.max_new_tokens = self.max_new_tokens, min(WARMUP_TOKENS, self.max_new_tokens)
        try:
            reference = self.run(BASELINE, input_ids, [])["output_ids"]
            for name in methods:
                if name == "adaptive-warm":
                    self._measure_dynaspec(input_ids, policy=_new_adaptive_policy())
                elif name != BASELINE:
                    self.run(name, input_ids, reference)
        finally:
            self.max_new_tokens = saved

    def run(self, name: str, input_ids: torch.Tensor, reference: list[int]) -> dict[str, Any]:
        """Measurements of `name` on one prompt, with "output_ids" (the new tokens)."""
        if name == BASELINE:
            return self._measure_dynaspec(input_ids, draft=None)
        if name in ("constant", "heuristic"):
            return self._measure_dynaspec(
                input_ids, num_assistant_tokens=5, num_assistant_tokens_schedule=name
            )
        if name == "dynamic":
            return self._measure_dynaspec(
                input_ids,
                num_assistant_tokens=20,
                assistant_confidence_threshold=0.4,
                num_assistant_tokens_schedule="dynamic",
            )
        if name == "adaptive":
            return self._measure_dynaspec(input_ids, **ADAPTIVE)
        if name == "adaptive-warm":
            if self.warm_policy is None:
                self.warm_policy = _new_adaptive_policy()
            return self._measure_dynaspec(input_ids, policy=self.warm_policy)
        if name == "oracle":
            full_reference = input_ids[0].tolist() + list(reference)
            return self._measure_dynaspec(input_ids, policy=OraclePolicy(full_reference))
        if name in ("prompt-lookup", "hybrid"):
            return self._measure_dynaspec(
                input_ids,
                draft=None if name == "prompt-lookup" else self.draft,
                prompt_lookup_num_tokens=LOOKUP_TOKENS,
                **ADAPTIVE,
            )
        if name == "hf-target":
            return self._measure_hf(input_ids, None)
        if name in HF_ASSIST:
            return self._measure_hf(input_ids, HF_ASSIST[name])
        if name in HF_LOOKUP_TOKENS:
            return self._measure_hf(input_ids, None, prompt_lookup=HF_LOOKUP_TOKENS[name])
        if name in FAST_METHODS:
            return self._measure_fast(name, input_ids)
        if name == LLAMACPP:
            return self._measure_llamacpp(input_ids)
        raise ConfigError(f"unknown method {name!r}")

    def reference_model(self, name: str) -> Any:
        """The model whose output method `name` must equal (for classifying a mismatch)."""
        reference = SPECS[name].reference
        if self.fast is not None and reference in FAST_METHODS:
            return self.fast.pair(reference)[0]
        return self.target

    def _measure_fast(self, name: str, input_ids: torch.Tensor) -> dict[str, Any]:
        if self.fast is None:
            raise ConfigError(f"method {name!r} needs the fast models (FastModels)")
        target, draft = self.fast.pair(name)
        kwargs: dict[str, Any] = dict(ADAPTIVE) if draft is not None else {}
        if FAST_METHODS[name].lookup:
            kwargs["prompt_lookup_num_tokens"] = LOOKUP_TOKENS
        measured = self._measure_dynaspec(input_ids, target=target, draft=draft, **kwargs)
        return {**measured, "family": "fast", **self.fast.facts(name)}

    def _measure_llamacpp(self, input_ids: torch.Tensor) -> dict[str, Any]:
        if self.llamacpp is None:
            raise ConfigError(f"method {LLAMACPP!r} needs a LlamaCppPeer")
        eos = self.eos_token_id if isinstance(self.eos_token_id, list) else [self.eos_token_id]
        result = self.llamacpp.generate(input_ids, self.max_new_tokens, [e for e in eos if e])
        wall, count = result.wall_time_s, len(result.new_ids)
        return {
            "family": "llamacpp",
            "new_tokens": count,
            "wall_time_s": wall,
            "tokens_per_s": count / wall if wall > 0 else None,
            "rounds": count,  # one token per forward: no draft
            "accepted_per_round": [],
            "drafted_per_round": [],
            "mean_accepted_per_round": None,
            "acceptance_rate": None,
            "draft_forwards": 0,
            "target_forwards": count,
            "draft_time_s": None,
            "target_time_s": None,
            "other_time_s": None,
            "inner_wall_time_s": wall,
            "stop_reasons": None,
            "gguf": self.llamacpp.path,
            "output_ids": result.new_ids,
        }

    def _measure_dynaspec(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        draft = kwargs.pop("draft", self.draft)
        target = kwargs.pop("target", self.target)
        start = perf_counter()
        output = generate(
            target,
            draft,
            input_ids,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.eos_token_id,
            **{**NEUTRAL_GREEDY_KWARGS, **kwargs},  # like for like with the peers
        )
        wall = perf_counter() - start
        summary = output.stats.summary()
        rounds = output.stats.rounds
        return {
            "family": "dynaspec",
            "new_tokens": summary.new_tokens,
            "wall_time_s": wall,
            "tokens_per_s": summary.new_tokens / wall if wall > 0 else None,
            "rounds": summary.rounds,
            "accepted_per_round": [r.num_accepted for r in rounds],
            "drafted_per_round": [r.num_drafted for r in rounds],
            "copied_per_round": [r.num_copied for r in rounds],
            "mean_accepted_per_round": summary.mean_accepted_per_round,
            "acceptance_rate": summary.acceptance_rate,
            "draft_forwards": summary.draft_forwards,
            "target_forwards": summary.target_forwards,
            "draft_time_s": summary.draft_time_s,
            "target_time_s": summary.target_time_s,
            "other_time_s": summary.other_time_s,
            "inner_wall_time_s": summary.wall_time_s,
            "stop_reasons": dict(Counter(r.stop_reason.value for r in rounds)),
            "processors": list(summary.processors),
            "output_ids": output.sequences[0, self._lead(input_ids) :].tolist(),
        }

    def _lead(self, input_ids: torch.Tensor) -> int:
        """Tokens before the new ones in `sequences`: the prompt, or (encoder-decoder) the
        decoder start token."""
        return 1 if getattr(self.target.config, "is_encoder_decoder", False) else input_ids.shape[1]

    def _measure_hf(
        self,
        input_ids: torch.Tensor,
        assist: HFAssistConfig | None,
        prompt_lookup: int | None = None,
    ) -> dict[str, Any]:
        result = self.peer.generate(
            input_ids,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            assist=assist,
            prompt_lookup_num_tokens=prompt_lookup,
        )
        new_ids = result.sequences[0, self._lead(input_ids) :].tolist()
        wall = result.wall_time_s
        drafted = sum(result.drafted_per_round)
        accepted = sum(result.accepted_per_round)
        rounds = result.target_forwards
        return {
            "family": "hf",
            "new_tokens": len(new_ids),
            "wall_time_s": wall,
            "tokens_per_s": len(new_ids) / wall if wall > 0 else None,
            "rounds": rounds,
            "accepted_per_round": result.accepted_per_round,
            "drafted_per_round": result.drafted_per_round,
            "mean_accepted_per_round": (
                accepted / rounds if rounds and result.accepted_per_round else None
            ),
            "acceptance_rate": (
                accepted / drafted if drafted else (0.0 if result.drafted_per_round else None)
            ),
            "draft_forwards": result.draft_forwards,
            "target_forwards": result.target_forwards,
            "draft_time_s": None,
            "target_time_s": None,
            "other_time_s": None,
            "inner_wall_time_s": wall,
            "stop_reasons": None,
            "output_ids": new_ids,
        }


def _new_adaptive_policy() -> AdaptivePolicy:
    policy = AdaptivePolicy(max_tokens=20)
    policy.reset()
    return policy


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
