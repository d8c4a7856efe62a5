"""How a bench method runs on one prompt: the run functions a `MethodSpec` names, the
models and state they share (`MethodRunner`), and the one place that reads the per-round
stats of a dynaspec generation (`round_stats`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from time import perf_counter
from typing import Any

import torch

from dynaspec.core.round import Round
from dynaspec.errors import ConfigError
from dynaspec.eval.bench.fast import FAST_METHODS, LLAMACPP, LLAMACPP_LOOKUP, FastModels
from dynaspec.eval.bench.measurement import Measurement, MethodOutput, rate
from dynaspec.eval.hf_peer import NEUTRAL_GREEDY_KWARGS, HFAssistConfig, HFPeer
from dynaspec.eval.openvino_peer import OPENVINO_METHODS
from dynaspec.generation import generate
from dynaspec.policies import AdaptivePolicy, OraclePolicy

# The settings of every adaptive method (model draft, prompt lookup, hybrid, fast methods).
ADAPTIVE: dict[str, Any] = {"num_assistant_tokens": 20, "num_assistant_tokens_schedule": "adaptive"}
# prompt_lookup_num_tokens: dynaspec's methods copy up to 32 tokens a round (the adaptive rule
# copies only as far as it pays).
LOOKUP_TOKENS = 32


@dataclass(frozen=True)
class MethodCall:
    """One method on one prompt."""

    name: str  # the method
    input_ids: torch.Tensor  # (1, T) the prompt
    reference: Sequence[int]  # the target alone's new tokens (empty before it ran)


class MethodRunner:
    """The models and state the run functions share over a run."""

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
        self.warm_policy: AdaptivePolicy | None = None  # adaptive-warm's, over the whole run
        self.fast: FastModels | None = None  # set by the caller when fast methods run
        self.llamacpp: Any = None  # a LlamaCppPeer, set by the caller for llamacpp-target
        self.llamacpp_lookup: Any = None  # the same with prompt lookup (llamacpp-prompt-lookup)
        self.openvino: Any = None  # an OpenVinoPeers, set by the caller for openvino-*

    def lead(self, input_ids: torch.Tensor) -> int:
        """Tokens before the new ones in `sequences`: the prompt, or (encoder-decoder) the
        decoder start token."""
        return 1 if getattr(self.target.config, "is_encoder_decoder", False) else input_ids.shape[1]


@dataclass(frozen=True)
class RoundStats:
    """The per-round facts of a dynaspec generation that the records keep."""

    accepted: tuple[int, ...]
    drafted: tuple[int, ...]
    copied: tuple[int, ...]  # of the drafted, copied by prompt lookup
    stop_reasons: dict[str, int]  # why drafting stopped -> rounds


def round_stats(rounds: Sequence[Round]) -> RoundStats:
    """The ONE place eval/bench reads dynaspec's per-round records (core.round.Round)."""
    return RoundStats(
        accepted=tuple(r.num_accepted for r in rounds),
        drafted=tuple(r.num_drafted for r in rounds),
        copied=tuple(r.num_copied for r in rounds),
        stop_reasons=dict(Counter(r.stop_reason.value for r in rounds)),
    )


def run_dynaspec(runner: MethodRunner, call: MethodCall, **settings: Any) -> MethodOutput:
    """dynaspec's generate() with `settings` (draft=None: the target alone; target=/draft=
    replace the run's models)."""
    draft = settings.pop("draft", runner.draft)
    target = settings.pop("target", runner.target)
    start = perf_counter()
    output = generate(
        target,
        draft,
        call.input_ids,
        max_new_tokens=runner.max_new_tokens,
        eos_token_id=runner.eos_token_id,
        **{**NEUTRAL_GREEDY_KWARGS, **settings},  # like for like with the peers
    )
    wall = perf_counter() - start
    summary = output.stats.summary()
    per_round = round_stats(output.stats.rounds)
    measurement = Measurement(
        family="dynaspec",
        new_tokens=summary.new_tokens,
        wall_time_s=wall,
        tokens_per_s=rate(summary.new_tokens, wall),
        rounds=summary.rounds,
        mean_accepted_per_round=summary.mean_accepted_per_round,
        acceptance_rate=summary.acceptance_rate,
        draft_forwards=summary.draft_forwards,
        target_forwards=summary.target_forwards,
        draft_time_s=summary.draft_time_s,
        target_time_s=summary.target_time_s,
        other_time_s=summary.other_time_s,
        inner_wall_time_s=summary.wall_time_s,
        stop_reasons=per_round.stop_reasons,
        accepted_per_round=per_round.accepted,
        drafted_per_round=per_round.drafted,
        copied_per_round=per_round.copied,
        processors=tuple(summary.processors),
    )
    new_ids = output.sequences[0, runner.lead(call.input_ids) :].tolist()
    return MethodOutput(measurement, tuple(new_ids))


def run_adaptive_policy(runner: MethodRunner, call: MethodCall, *, warm: bool) -> MethodOutput:
    """The adaptive policy as an object: the run's one policy (`warm`), or a fresh one."""
    if not warm:
        return run_dynaspec(runner, call, policy=_new_adaptive_policy())
    if runner.warm_policy is None:
        runner.warm_policy = _new_adaptive_policy()
    return run_dynaspec(runner, call, policy=runner.warm_policy)


def run_oracle(runner: MethodRunner, call: MethodCall) -> MethodOutput:
    """Drafts up to the first disagreement with the target-alone output."""
    full_reference = call.input_ids[0].tolist() + list(call.reference)
    return run_dynaspec(runner, call, policy=OraclePolicy(full_reference))


def run_fast(runner: MethodRunner, call: MethodCall) -> MethodOutput:
    """A fast method (dynaspec.eval.bench.fast) on its own adapters."""
    if runner.fast is None:
        raise ConfigError(f"method {call.name!r} needs the fast models (FastModels)")
    target, draft = runner.fast.pair(call.name)
    settings: dict[str, Any] = dict(ADAPTIVE) if draft is not None else {}
    if FAST_METHODS[call.name].lookup:
        settings["prompt_lookup_num_tokens"] = LOOKUP_TOKENS
    result = run_dynaspec(runner, call, target=target, draft=draft, **settings)
    facts = runner.fast.facts(call.name)
    measurement = replace(
        result.measurement,
        family="fast",
        compile_time_s=facts["compile_time_s"],
        weight_bytes=facts["weight_bytes"],
        fast_models=tuple(facts["fast_models"]),
    )
    return MethodOutput(measurement, result.output_ids)


def run_hf(
    runner: MethodRunner,
    call: MethodCall,
    *,
    assist: HFAssistConfig | None = None,
    prompt_lookup: int | None = None,
) -> MethodOutput:
    """transformers' generate(): greedy, assisted (`assist`) or prompt lookup."""
    result = runner.peer.generate(
        call.input_ids,
        max_new_tokens=runner.max_new_tokens,
        eos_token_id=runner.eos_token_id,
        pad_token_id=runner.pad_token_id,
        assist=assist,
        prompt_lookup_num_tokens=prompt_lookup,
    )
    new_ids = result.sequences[0, runner.lead(call.input_ids) :].tolist()
    wall = result.wall_time_s
    drafted = sum(result.drafted_per_round)
    accepted = sum(result.accepted_per_round)
    rounds = result.target_forwards
    measurement = Measurement(
        family="hf",
        new_tokens=len(new_ids),
        wall_time_s=wall,
        tokens_per_s=rate(len(new_ids), wall),
        rounds=rounds,
        mean_accepted_per_round=(
            accepted / rounds if rounds and result.accepted_per_round else None
        ),
        acceptance_rate=(
            accepted / drafted if drafted else (0.0 if result.drafted_per_round else None)
        ),
        **_outside_loop(result.draft_forwards, result.target_forwards, wall),
        accepted_per_round=tuple(result.accepted_per_round),
        drafted_per_round=tuple(result.drafted_per_round),
    )
    return MethodOutput(measurement, tuple(new_ids))


def run_llamacpp(runner: MethodRunner, call: MethodCall, *, lookup: bool = False) -> MethodOutput:
    """llama.cpp on the target's GGUF, alone or with its prompt lookup draft (`lookup`)."""
    peer = runner.llamacpp_lookup if lookup else runner.llamacpp
    if peer is None:
        name = LLAMACPP_LOOKUP if lookup else LLAMACPP
        raise ConfigError(f"method {name!r} needs a LlamaCppPeer")
    result = peer.generate(call.input_ids, runner.max_new_tokens, _eos_list(runner))
    wall = result.wall_time_s
    return _peer_output("llamacpp", result.new_ids, wall, drafts=lookup, gguf=peer.path)


def run_openvino(runner: MethodRunner, call: MethodCall) -> MethodOutput:
    """An OpenVINO GenAI method (dynaspec.eval.openvino_peer) on the same prompt ids."""
    if runner.openvino is None:
        raise ConfigError(f"method {call.name!r} needs the OpenVINO pipelines (OpenVinoPeers)")
    result = runner.openvino.generate(
        call.name, call.input_ids, runner.max_new_tokens, _eos_list(runner)
    )
    drafts = OPENVINO_METHODS[call.name].pipeline != "target"
    wall = result.wall_time_s
    return _peer_output("openvino", result.new_ids, wall, drafts=drafts, openvino_ir=result.ir)


def _eos_list(runner: MethodRunner) -> list[int]:
    eos = runner.eos_token_id if isinstance(runner.eos_token_id, list) else [runner.eos_token_id]
    return [int(e) for e in eos if e is not None]


def _peer_output(
    family: str, new_ids: Sequence[int], wall: float, *, drafts: bool, **where: Any
) -> MethodOutput:
    """The output of another engine's method, timed from outside: one target forward per
    token when it decodes alone (`drafts` False), its rounds and forwards unknown otherwise."""
    count = len(new_ids)
    forwards = None if drafts else count
    measurement = Measurement(
        family=family,
        new_tokens=count,
        wall_time_s=wall,
        tokens_per_s=rate(count, wall),
        rounds=forwards,
        mean_accepted_per_round=None,
        acceptance_rate=None,
        **_outside_loop(None if drafts else 0, forwards, wall),
        accepted_per_round=(),
        drafted_per_round=(),
        **where,
    )
    return MethodOutput(measurement, tuple(int(token) for token in new_ids))


def _outside_loop(
    draft_forwards: int | None, target_forwards: int | None, wall: float
) -> dict[str, Any]:
    """The fields of a method timed from outside only (no split of its time, no stop
    reasons)."""
    return {
        "draft_forwards": draft_forwards,
        "target_forwards": target_forwards,
        "draft_time_s": None,
        "target_time_s": None,
        "other_time_s": None,
        "inner_wall_time_s": wall,
        "stop_reasons": None,
    }


def _new_adaptive_policy() -> AdaptivePolicy:
    policy = AdaptivePolicy(max_tokens=20)
    policy.reset()
    return policy
