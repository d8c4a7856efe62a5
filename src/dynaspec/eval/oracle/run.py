"""Oracle lookahead analysis: how long the draft stays right, round by round, on real text.

The *oracle lookahead* of a speculative round (DESIGN.md) is the number of tokens the draft
proposes before its first disagreement with the target, plus one: the *agreeing run* r, then
the first wrong token, which the target replaces with its own. A policy that knew r in
advance would draft exactly r + 1 tokens every round: no round ends with correct draft tokens
left undrafted, and no draft token is spent past the one that must be checked (Mamou et al.
2024, "Dynamic Speculation Lookahead Accelerates Speculative Decoding of Large Language
Models"). How much r varies is why a fixed lookahead wastes work.

Everything is measured through the one decoding loop (`dynaspec.core.loop.decode`), per prompt:

1. *reference*: the target alone, greedy (`generate(target, None, ...)`).
2. *real oracle run*: `generate(target, draft, policy=OraclePolicy(reference))`. The draft
   stops right after its first token that differs from the reference, so round i drafts
   r_i + 1 tokens and the target accepts r_i of them. Its output must equal the reference.
3. *draft trace*: one draft forward over the whole reference gives, at every new-token
   position, the draft's teacher-forced greedy token and its probability (confidence).
4. *replays*: `ReplayTarget` and `ReplayDraft` are `ModelAdapter`s that replay 1 and 3 at no
   model cost; the same loop runs over them with every policy (constant 1..10, dynamic at
   thresholds 0.1..0.9, heuristic, adaptive, oracle), which gives the exact round structure
   and forward counts each policy has on the same text. The replayed oracle must reproduce
   step 2 round for round: the consistency check of the replay.

The one approximation: within a round, after the draft's first wrong token, the draft
conditions on text that the reference never contains, so its true proposals there are
unknown. They are rejected whatever they are (the target accepts a prefix only), so the
forward counts of policies that do not look at the confidence (constant, heuristic, oracle)
are exact; a confidence-driven policy (dynamic, adaptive) needs the confidence of those
tokens to know when it stops, and the replay uses the draft's teacher-forced confidence at
the same position instead. The adaptive policy also learns what things cost from the
round's times, which a replay does not have: `SimulatedTimePolicy` gives it the cost model's
times instead (`dynaspec.eval.cost_model`).

Numerics: the trace is one forward over the whole sequence, a real run feeds tokens a few at
a time; in bf16 the two can differ in the last bit and flip an argmax at a near-tie, which
the consistency check counts (in fp32 the two agree exactly on the tiny test models).

CLI: `dynaspec oracle` (`add_oracle_arguments`, `run_oracle`); the report is written by
`dynaspec.eval.oracle.report`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from dynaspec.backends import ModelAdapter, as_adapter
from dynaspec.core.config import SpecConfig
from dynaspec.core.stats import GenerationStats
from dynaspec.core.validation import eos_ids
from dynaspec.errors import ConfigError, InputError
from dynaspec.eval.cost_model import CostProfile, measure_costs
from dynaspec.eval.provenance import git_state, library_versions, machine_info
from dynaspec.generation import generate
from dynaspec.policies import (
    DraftStep,
    LookaheadPolicy,
    OraclePolicy,
    RoundResult,
    make_policy,
)

ORACLE = "oracle"  # method name of the oracle policy in every table
STATIC_LOOKAHEADS: tuple[int, ...] = tuple(range(1, 11))  # constant-k policies compared
DYNAMIC_THRESHOLDS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DYNAMIC_MAX_TOKENS = 20  # num_assistant_tokens of the dynamic and adaptive policies
HEURISTIC_START = 5  # num_assistant_tokens the heuristic starts from (as in dynaspec bench)
ORACLE_MAX_TOKENS = 64  # OraclePolicy's cap on one round's draft
DEFAULT_PROMPTS = 20  # --n: prompts per task
DEFAULT_NEW_TOKENS = 128  # --max-new-tokens (what dynaspec bench decodes)
SMOKE_PROMPTS = 2  # --n with --smoke
SMOKE_NEW_TOKENS = 32  # --max-new-tokens with --smoke
RECORDS_FILE = "oracle_records.jsonl"  # one PromptRecord per line (the raw measurements)
COSTS_FILE = "oracle_costs.json"  # the measured CostProfile
COST_MAX_TOKENS = 21  # T(n) measured for n = 1..21: the longest default draft + 1


# ---------------------------------------------------------------------------------------
# What is recorded
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoundInfo:
    """One round of a decode, as the analysis needs it (from a stats.RoundRecord)."""

    drafted: int  # tokens the draft proposed
    accepted: int  # of those, the prefix the target accepted
    emitted: int  # tokens committed (accepted + the target's own, cut at EOS/length)
    stop_reason: str  # why drafting stopped (stats.RoundRecord.stop_reason)
    draft_forwards: int  # draft forward calls
    confidences: tuple[float, ...] = ()  # draft probability of each drafted token

    @property
    def censored(self) -> bool:
        """True when drafting stopped before the draft's first wrong token was seen (cut by
        max_new_tokens, EOS or a cap): the true agreeing run is >= `accepted`."""
        return self.stop_reason != ORACLE or self.emitted < self.accepted + 1

    def to_json(self, with_confidences: bool = False) -> list[Any]:
        row: list[Any] = [self.drafted, self.accepted, self.emitted, self.stop_reason]
        row.append(self.draft_forwards)
        if with_confidences:
            row.append([round(c, 5) for c in self.confidences])
        return row

    @classmethod
    def from_json(cls, row: Sequence[Any]) -> RoundInfo:
        confidences = tuple(float(c) for c in row[5]) if len(row) > 5 else ()
        return cls(int(row[0]), int(row[1]), int(row[2]), str(row[3]), int(row[4]), confidences)


def rounds_of(stats: GenerationStats) -> tuple[RoundInfo, ...]:
    """The rounds of a finished decode."""
    return tuple(
        RoundInfo(
            drafted=r.num_drafted,
            accepted=r.num_accepted,
            emitted=r.num_emitted,
            stop_reason=r.stop_reason,
            draft_forwards=r.draft_forwards,
            confidences=tuple(r.confidences),
        )
        for r in stats.rounds
    )


@dataclass(frozen=True)
class DraftTrace:
    """The draft's teacher-forced greedy predictions along a reference.

    Index i is new-token position `num_first + i`: `tokens[i]` is the draft's argmax given the
    reference before that position and `confidences[i]` its softmax probability. One entry
    more than the reference has new tokens: the last one predicts past the reference's end.
    """

    tokens: tuple[int, ...]  # (m + 1,)
    confidences: tuple[float, ...]  # (m + 1,)


@dataclass(frozen=True)
class PromptRecord:
    """Everything measured with the real models for one prompt (one JSONL line)."""

    task: str  # data set the prompt belongs to
    prompt_id: str  # id within the task
    num_first: int  # tokens decoding starts from: the prompt (decoder start token for enc-dec)
    new_tokens: tuple[int, ...]  # the target's greedy output, the reference
    vocab_size: int  # rows of the models' output distribution
    eos_token_ids: tuple[int, ...]  # ids that ended generation
    max_new_tokens: int  # the length limit of every decode
    trace: DraftTrace  # teacher-forced draft predictions along the reference
    real_oracle: tuple[RoundInfo, ...] | None  # rounds of the real oracle run (None: skipped)
    real_oracle_lossless: bool | None  # the real oracle run's output equals the reference
    reference_time_s: float  # wall time of the reference decode (target alone)
    real_oracle_time_s: float  # wall time of the real oracle run (0 when skipped)
    trace_time_s: float  # wall time of the teacher-forced draft forward
    reference_step_s: float  # median target time per round of the reference decode: T(1)

    @property
    def key(self) -> tuple[str, str]:
        return self.task, self.prompt_id

    def reference(self) -> list[int]:
        """The full token sequence the replay works on. Replays never look at the prompt's
        content, so zeros stand in for it (the records stay small and hold no prompt text)."""
        return [0] * self.num_first + list(self.new_tokens)

    def calibration_pairs(self) -> list[tuple[float, bool]]:
        """(draft confidence, draft argmax == reference token) at every new-token position."""
        return [
            (confidence, token == reference)
            for token, confidence, reference in zip(
                self.trace.tokens, self.trace.confidences, self.new_tokens, strict=False
            )
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "id": self.prompt_id,
            "num_first": self.num_first,
            "new_tokens": list(self.new_tokens),
            "vocab_size": self.vocab_size,
            "eos_token_ids": list(self.eos_token_ids),
            "max_new_tokens": self.max_new_tokens,
            "trace_tokens": list(self.trace.tokens),
            "trace_confidences": [round(c, 6) for c in self.trace.confidences],
            "real_oracle": None
            if self.real_oracle is None
            else [r.to_json(with_confidences=True) for r in self.real_oracle],
            "real_oracle_lossless": self.real_oracle_lossless,
            "reference_time_s": self.reference_time_s,
            "real_oracle_time_s": self.real_oracle_time_s,
            "trace_time_s": self.trace_time_s,
            "reference_step_s": self.reference_step_s,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PromptRecord:
        real = data.get("real_oracle")
        return cls(
            task=str(data["task"]),
            prompt_id=str(data["id"]),
            num_first=int(data["num_first"]),
            new_tokens=tuple(int(t) for t in data["new_tokens"]),
            vocab_size=int(data["vocab_size"]),
            eos_token_ids=tuple(int(t) for t in data["eos_token_ids"]),
            max_new_tokens=int(data["max_new_tokens"]),
            trace=DraftTrace(
                tuple(int(t) for t in data["trace_tokens"]),
                tuple(float(c) for c in data["trace_confidences"]),
            ),
            real_oracle=None if real is None else tuple(RoundInfo.from_json(r) for r in real),
            real_oracle_lossless=data.get("real_oracle_lossless"),
            reference_time_s=float(data.get("reference_time_s", 0.0)),
            real_oracle_time_s=float(data.get("real_oracle_time_s", 0.0)),
            trace_time_s=float(data.get("trace_time_s", 0.0)),
            reference_step_s=float(data.get("reference_step_s", 0.0)),
        )


@dataclass
class PromptAnalysis:
    """A prompt's record plus the replayed decodes of every policy on its reference."""

    record: PromptRecord
    replays: dict[str, tuple[RoundInfo, ...]] = field(default_factory=dict)  # method -> rounds

    @property
    def oracle_rounds(self) -> tuple[RoundInfo, ...]:
        """The oracle's rounds: the real run's when it was made, else the replay's."""
        if self.record.real_oracle is not None:
            return self.record.real_oracle
        return self.replays[ORACLE]

    @property
    def replay_consistent(self) -> bool | None:
        """The replayed oracle run has the real one's rounds (drafted, accepted), in order."""
        if self.record.real_oracle is None or ORACLE not in self.replays:
            return None
        real = [(r.drafted, r.accepted) for r in self.record.real_oracle]
        return real == [(r.drafted, r.accepted) for r in self.replays[ORACLE]]

    def first_inconsistent_round(self) -> int | None:
        """Index of the first round where the replayed and real oracle differ (None: none)."""
        if self.record.real_oracle is None or ORACLE not in self.replays:
            return None
        real, replayed = self.record.real_oracle, self.replays[ORACLE]
        for index, (a, b) in enumerate(zip(real, replayed, strict=False)):
            if (a.drafted, a.accepted) != (b.drafted, b.accepted):
                return index
        return None if len(real) == len(replayed) else min(len(real), len(replayed))


# ---------------------------------------------------------------------------------------
# Replay adapters
# ---------------------------------------------------------------------------------------


def confident_logits(token: int, confidence: float, vocab_size: int) -> torch.Tensor:
    """(V,) logits whose softmax gives `token` probability `confidence`, the rest evenly.

    `confidence` is clamped to [1/V, 1]: an argmax always has at least 1/V.
    """
    confidence = min(max(confidence, 1.0 / vocab_size), 1.0)
    rest = (1.0 - confidence) / (vocab_size - 1)
    if rest >= confidence:  # confidence == 1/V: keep `token` the strict argmax
        rest = confidence * (1.0 - 1e-4)
    logits = torch.full((vocab_size,), math.log(rest) if rest > 0 else -math.inf)  # (V,)
    logits[token] = math.log(confidence)
    return logits


class ReplayTarget:
    """A `ModelAdapter` that replays a recorded greedy output of the target.

    At every position its logits put the argmax on the reference token (one-hot logits), so
    greedy verification accepts exactly the drafted prefix that equals the reference. Past
    the reference's end (a draft that ran past an EOS, whose round is cut at that EOS anyway)
    it predicts `fill_token`.
    """

    is_encoder_decoder = False
    max_length: int | None = None

    def __init__(
        self, reference: Sequence[int], num_first: int, vocab_size: int, fill_token: int = 0
    ) -> None:
        self.reference = torch.as_tensor(list(reference), dtype=torch.long)  # (n,)
        self.num_first = num_first
        self.vocab_size = vocab_size
        self.fill_token = fill_token
        self.num_cached = 0

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        self.num_cached = 0
        return self.reference[: self.num_first].clone()  # (n0,)

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        self.num_cached += new_tokens.numel()
        # The last num_logits fed tokens predict positions num_cached - num_logits + 1 ...
        first = self.num_cached - num_logits + 1
        predicted = [
            int(self.reference[p]) if p < self.reference.numel() else self.fill_token
            for p in range(first, first + num_logits)
        ]
        logits = torch.zeros(num_logits, self.vocab_size)  # (num_logits, V)
        logits[torch.arange(num_logits), torch.tensor(predicted)] = 1.0
        return logits

    def crop(self, num_tokens: int) -> None:
        self.num_cached = min(self.num_cached, num_tokens)


class ReplayDraft:
    """A `ModelAdapter` that replays the draft's teacher-forced predictions (a DraftTrace).

    The draft's proposal for position p is the trace's token and confidence at p, whatever it
    was fed: exact while the round is on the reference, and the documented approximation
    after the draft's first wrong token (see the module docstring). Past the trace's end the
    last entry repeats.
    """

    is_encoder_decoder = False
    max_length: int | None = None

    def __init__(self, trace: DraftTrace, num_first: int, vocab_size: int) -> None:
        if not trace.tokens:
            raise InputError("the draft trace is empty: it needs one entry per new token + 1")
        self.trace = trace
        self.num_first = num_first
        self.vocab_size = vocab_size
        self.num_cached = 0

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        self.num_cached = 0
        return input_ids[0]

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        self.num_cached += new_tokens.numel()
        last = len(self.trace.tokens) - 1
        rows = []
        for position in range(self.num_cached - num_logits + 1, self.num_cached + 1):
            index = min(max(position - self.num_first, 0), last)
            token, confidence = self.trace.tokens[index], self.trace.confidences[index]
            rows.append(confident_logits(token, confidence, self.vocab_size))
        return torch.stack(rows)  # (num_logits, V)

    def crop(self, num_tokens: int) -> None:
        self.num_cached = min(self.num_cached, num_tokens)


class SimulatedTimePolicy:
    """Wraps a policy so that it learns the cost model's times instead of measured ones.

    In a replay the forwards cost nothing, so a policy that learns costs online (adaptive)
    would see meaningless times. This wrapper hands it each round's result with
    `draft_time_s = draft_forwards * c_d` and `target_time_s = T(num_verified)` from a
    CostProfile. When the profile has prefill costs, a forward over a catch-up (the prompt,
    or tokens skipped) costs its tokens x p_t (target) or p_d (draft) instead. Everything
    else passes through unchanged.
    """

    def __init__(self, inner: LookaheadPolicy, profile: CostProfile) -> None:
        self.inner = inner
        self.profile = profile
        self.name = inner.name

    @property
    def stop_reason(self) -> str:
        return self.inner.stop_reason

    def reset(self) -> None:
        self.inner.reset()

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.inner.max_lookahead(catchup, remaining)

    def should_stop(self, step: DraftStep) -> bool:
        return self.inner.should_stop(step)

    def update(self, result: RoundResult) -> None:
        profile = self.profile
        draft_time = result.draft_forwards * profile.draft_token_s
        target_time = profile.verify_time(result.num_verified)
        if profile.target_prefill_token_s > 0:  # catch-ups cost like the prefill
            if result.num_verified > result.num_drafted + 1:
                target_time = result.num_verified * profile.target_prefill_token_s
            if result.draft_forwards and result.draft_catchup > 2:
                draft_time += result.draft_catchup * profile.draft_prefill_token_s
                draft_time -= profile.draft_token_s
        self.inner.update(
            dataclasses.replace(result, draft_time_s=draft_time, target_time_s=target_time)
        )


# ---------------------------------------------------------------------------------------
# Policies compared
# ---------------------------------------------------------------------------------------

PolicyFactory = Callable[[Sequence[int]], LookaheadPolicy]  # full reference -> fresh policy


@dataclass(frozen=True)
class PolicySpec:
    """A policy the replay runs, under the method name the tables show."""

    name: str  # e.g. "constant-5", "dynamic-0.4", "heuristic", "adaptive", "oracle"
    make: PolicyFactory  # builds a fresh policy from the reference token sequence


def constant_name(lookahead: int) -> str:
    return f"constant-{lookahead}"


def dynamic_name(threshold: float) -> str:
    return f"dynamic-{threshold:g}"


def adaptive_available() -> bool:
    """True when this dynaspec has the cost-aware adaptive policy (dynaspec.policies.adaptive)."""
    return importlib.util.find_spec("dynaspec.policies.adaptive") is not None


def default_policy_specs(
    static: Sequence[int] = STATIC_LOOKAHEADS,
    thresholds: Sequence[float] = DYNAMIC_THRESHOLDS,
    *,
    include_adaptive: bool | None = None,
) -> list[PolicySpec]:
    """oracle, constant-k for k in `static`, dynamic-t for t in `thresholds` (at most 20
    tokens), heuristic (start 5, +2/-1) and, when present, adaptive (at most 20 tokens):
    the same settings as `dynaspec bench`'s methods of those names."""

    def constant(k: int) -> PolicySpec:
        spec = SpecConfig(num_assistant_tokens=k, num_assistant_tokens_schedule="constant")
        return PolicySpec(constant_name(k), lambda _ref: make_policy(spec))

    def dynamic(threshold: float) -> PolicySpec:
        spec = SpecConfig(
            num_assistant_tokens=DYNAMIC_MAX_TOKENS,
            assistant_confidence_threshold=threshold,
            num_assistant_tokens_schedule="dynamic",
        )
        return PolicySpec(dynamic_name(threshold), lambda _ref: make_policy(spec))

    def named(schedule: str, num_assistant_tokens: int) -> PolicySpec:
        spec = SpecConfig(
            num_assistant_tokens=num_assistant_tokens, num_assistant_tokens_schedule=schedule
        )
        return PolicySpec(schedule, lambda _ref: make_policy(spec))

    specs = [PolicySpec(ORACLE, lambda ref: OraclePolicy(ref, max_tokens=ORACLE_MAX_TOKENS))]
    specs += [constant(k) for k in static]
    specs += [dynamic(t) for t in thresholds]
    specs.append(named("heuristic", HEURISTIC_START))
    if adaptive_available() if include_adaptive is None else include_adaptive:
        specs.append(named("adaptive", DYNAMIC_MAX_TOKENS))
    return specs


# ---------------------------------------------------------------------------------------
# Measuring one prompt
# ---------------------------------------------------------------------------------------


def trace_draft(
    draft: ModelAdapter, input_ids: torch.Tensor, reference: torch.Tensor, num_first: int
) -> DraftTrace:
    """The draft's teacher-forced greedy token and confidence at every new-token position of
    `reference` (n,), plus one past its end, from one forward over the whole sequence.

    Greedy decoding picks the argmax of the raw logits and the loop's confidence is its
    softmax probability (no temperature or top-k/top-p in greedy mode): the same here.
    """
    with torch.inference_mode():
        draft.begin(input_ids)
        num_logits = reference.numel() - num_first + 1
        logits = draft.forward(reference, num_logits).float()  # (m + 1, V)
        draft.crop(0)
    tokens = logits.argmax(-1)  # (m + 1,)
    confidences = torch.softmax(logits, -1).gather(-1, tokens[:, None])[:, 0]  # (m + 1,)
    return DraftTrace(tuple(tokens.tolist()), tuple(confidences.tolist()))


def measure_prompt(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    *,
    task: str,
    prompt_id: str,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    real_oracle: bool = True,
    reference_schedule: str | None = None,
) -> PromptRecord:
    """Steps 1-3 of the module docstring for one prompt, with the real models.

    reference_schedule: None decodes the reference with the target alone; a schedule name
    decodes it speculatively with that schedule, which is lossless, so the text is the
    target's greedy output (each token is the target's argmax in a verification forward),
    only faster. Then reference_step_s is not a plain target step.
    """
    target_adapter = as_adapter(target)
    draft_adapter = as_adapter(draft)
    eos = list(eos_token_ids)
    reference_out = generate(
        target_adapter,
        None if reference_schedule is None else draft_adapter,
        input_ids,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos,
        num_assistant_tokens_schedule=reference_schedule or "dynamic",
    )
    reference = reference_out.sequences[0]  # (n0 + m,)
    num_new = reference_out.stats.summary().new_tokens
    num_first = reference.numel() - num_new
    step_times = sorted(r.target_time_s for r in reference_out.stats.rounds[1:]) or [0.0]
    rounds: tuple[RoundInfo, ...] | None = None
    lossless: bool | None = None
    oracle_time = 0.0
    if real_oracle:
        oracle_out = generate(
            target_adapter,
            draft_adapter,
            input_ids,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos,
            policy=OraclePolicy(reference.tolist(), max_tokens=ORACLE_MAX_TOKENS),
        )
        rounds = rounds_of(oracle_out.stats)
        lossless = torch.equal(oracle_out.sequences[0], reference)
        oracle_time = oracle_out.stats.wall_time_s
    started = perf_counter()
    trace = trace_draft(draft_adapter, input_ids, reference, num_first)
    trace_time = perf_counter() - started
    return PromptRecord(
        task=task,
        prompt_id=prompt_id,
        num_first=num_first,
        new_tokens=tuple(reference[num_first:].tolist()),
        vocab_size=target_adapter.vocab_size,
        eos_token_ids=tuple(eos),
        max_new_tokens=max_new_tokens,
        trace=trace,
        real_oracle=rounds,
        real_oracle_lossless=lossless,
        reference_time_s=reference_out.stats.wall_time_s,
        real_oracle_time_s=oracle_time,
        trace_time_s=trace_time,
        reference_step_s=step_times[len(step_times) // 2],
    )


@dataclass(frozen=True)
class ReplayText:
    """A record in the replay's own small vocabulary.

    A replay only needs the tokens that occur in it, so they are renumbered 0..U-1 (token 0
    stays 0: it fills the prompt) and the vocabulary shrinks to what the confidences need
    (the rest of a draft distribution is spread evenly, so V >= 2 / min confidence keeps
    every recorded argmax an argmax): softmaxes over a few hundred entries instead of
    ~150k, and the same rounds.
    """

    reference: tuple[int, ...]  # (n0 + m,) renumbered; zeros stand in for the prompt
    num_first: int  # prompt tokens
    trace: DraftTrace  # renumbered draft trace
    eos_token_ids: tuple[int, ...]  # renumbered
    vocab_size: int  # size of the replay's vocabulary

    @classmethod
    def of(cls, record: PromptRecord) -> ReplayText:
        used = sorted({0, *record.new_tokens, *record.trace.tokens, *record.eos_token_ids})
        index = {token: i for i, token in enumerate(used)}
        lowest = min(record.trace.confidences, default=1.0)
        needed = math.ceil(2.0 / max(lowest, 1e-9)) + 1
        vocab_size = min(max(len(used) + 1, needed), max(record.vocab_size, len(used)))
        return cls(
            reference=tuple(index[t] for t in record.reference()),
            num_first=record.num_first,
            trace=DraftTrace(
                tuple(index[t] for t in record.trace.tokens), record.trace.confidences
            ),
            eos_token_ids=tuple(index[t] for t in record.eos_token_ids),
            vocab_size=vocab_size,
        )


def replay(
    record: PromptRecord,
    make_policy_for: PolicyFactory,
    profile: CostProfile | None = None,
    text: ReplayText | None = None,
) -> tuple[RoundInfo, ...]:
    """Runs the decoding loop over the replay adapters of `record` with the policy that
    `make_policy_for(reference)` builds (the reference in the replay's own token ids).

    With a `profile`, the policy learns the cost model's times (SimulatedTimePolicy).
    `text` is `ReplayText.of(record)`, computed when not given. Raises RuntimeError if the
    replay does not reproduce the reference (a bug: the replay target only ever emits
    reference tokens).
    """
    text = ReplayText.of(record) if text is None else text
    target = ReplayTarget(text.reference, text.num_first, text.vocab_size)
    draft = ReplayDraft(text.trace, text.num_first, text.vocab_size)
    policy = make_policy_for(text.reference)
    if profile is not None:
        policy = SimulatedTimePolicy(policy, profile)
    policy.reset()
    out = generate(
        target,
        draft,
        torch.zeros(1, text.num_first, dtype=torch.long),
        max_new_tokens=record.max_new_tokens,
        eos_token_id=list(text.eos_token_ids),
        policy=policy,
    )
    if tuple(out.sequences[0].tolist()) != text.reference:
        raise RuntimeError(
            f"the replay of {record.task}/{record.prompt_id} with {policy.name} did not "
            "reproduce the reference: a bug in dynaspec.eval.oracle.run, please report it"
        )
    return rounds_of(out.stats)


def analyze(
    record: PromptRecord,
    specs: Sequence[PolicySpec] | None = None,
    profile: CostProfile | None = None,
) -> PromptAnalysis:
    """Replays every policy of `specs` (default: default_policy_specs()) on `record`."""
    specs = default_policy_specs() if specs is None else specs
    text = ReplayText.of(record)
    replays = {spec.name: replay(record, spec.make, profile, text) for spec in specs}
    return PromptAnalysis(record, replays)


# ---------------------------------------------------------------------------------------
# CLI: dynaspec oracle
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptInput:
    """A prompt ready to decode."""

    task: str
    prompt_id: str
    input_ids: torch.Tensor  # (1, T)


def add_oracle_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `dynaspec oracle` options to `parser`."""
    parser.add_argument(
        "--pair", default="qwen2.5-coder", help="model pair preset (default: qwen2.5-coder)"
    )
    parser.add_argument(
        "--task",
        default="all",
        choices=("code", "summarization", "open-ended", "all"),
        help="prompt set (default: all three)",
    )
    parser.add_argument(
        "--prompts", metavar="FILE.jsonl", help="your own prompts instead of --task's"
    )
    parser.add_argument(
        "--n",
        type=int,
        default=None,
        help="prompts per task (default 20, --smoke 2; with --prompts: the file's first N)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt sample")
    parser.add_argument(
        "--max-new-tokens", type=int, default=None, help="per prompt (default 128, --smoke 32)"
    )
    parser.add_argument("--out", default="benchmarks/oracle", help="output directory")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny random fp32 models and random prompts; runs in seconds (CI)",
    )
    parser.add_argument("--dtype", default="bfloat16", help="model dtype (default bfloat16)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument(
        "--bench-jsonl",
        metavar="PATH",
        help="benchmark results (dynaspec bench) to show measured speedups next to predicted",
    )
    parser.add_argument(
        "--skip-real-oracle",
        action="store_true",
        help="take the oracle rounds from the replay only (saves ~40%% of the model time, "
        "loses the replay consistency check)",
    )
    parser.add_argument(
        "--max-prompt-chars",
        type=int,
        default=2000,
        help="cut summarization articles at this many characters (default 2000)",
    )
    parser.add_argument(
        "--reference-schedule",
        default=None,
        help="decode each reference speculatively with this schedule (lossless, faster) "
        "instead of with the target alone",
    )
    parser.add_argument(
        "--cost-reps", type=int, default=5, help="repetitions per point of the cost measurement"
    )
    parser.add_argument(
        "--cost-max-n",
        type=int,
        default=COST_MAX_TOKENS,
        help=f"measure T(n) for n = 1..N verified tokens (default {COST_MAX_TOKENS}: a draft "
        "of 20 plus the target's own token); larger n are extrapolated",
    )
    parser.add_argument(
        "--remeasure-costs",
        action="store_true",
        help="with --resume: measure the costs afresh (run it on an otherwise idle machine) "
        "and keep the prompts already measured",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"reuse prompts already measured in OUT/{RECORDS_FILE} and OUT/{COSTS_FILE}; "
        "with every prompt done, re-renders the report without loading a model",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run_oracle(args: argparse.Namespace) -> int:
    """`dynaspec oracle`: measures, replays, writes OUT/{records, costs, summary, report, plots}."""
    from tqdm.auto import tqdm

    from dynaspec.eval.oracle import report as oracle_report

    oracle_report.require_plotting()
    args = argparse.Namespace(**vars(args))  # defaults resolved on a copy
    if args.n is None:
        args.n = SMOKE_PROMPTS if args.smoke else DEFAULT_PROMPTS
    if args.max_new_tokens is None:
        args.max_new_tokens = SMOKE_NEW_TOKENS if args.smoke else DEFAULT_NEW_TOKENS
    if args.n < 1 or args.max_new_tokens < 1:
        raise ConfigError("--n and --max-new-tokens must be >= 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        torch.set_num_threads(args.threads or 1)
    models = _LazyModels(args)
    prompt_keys = _prompt_keys(args)
    setup = _setup(args)
    records = _load_records(out, args) if args.resume else {}
    profile = _load_costs(out, setup) if args.resume and not args.remeasure_costs else None
    todo = [key for key in prompt_keys if key not in records]
    records_path = out / RECORDS_FILE
    if not args.resume or not records_path.exists():
        records_path.write_text("")
    if profile is None:
        prompts = models.prompts(prompt_keys[:1])
        target, draft = models.pair()
        profile = measure_costs(
            target, draft, prompts[0].input_ids, max_tokens=args.cost_max_n, reps=args.cost_reps
        )
        costs = {**profile.to_json(), "setup": setup}
        (out / COSTS_FILE).write_text(json.dumps(costs, indent=2) + "\n")
    specs = default_policy_specs()
    analyses: dict[tuple[str, str], PromptAnalysis] = {}
    progress = tqdm(total=len(prompt_keys), desc="oracle", unit="prompt", disable=args.no_progress)
    for key in prompt_keys:
        if key in records:
            analyses[key] = analyze(records[key], specs, profile)
            progress.update(1)
    if todo:
        target, draft = models.pair()
        eos = models.eos()
        for prompt in models.prompts(todo):
            progress.set_postfix_str(f"{prompt.task} {prompt.prompt_id}")
            record = measure_prompt(
                target,
                draft,
                prompt.input_ids,
                task=prompt.task,
                prompt_id=prompt.prompt_id,
                max_new_tokens=args.max_new_tokens,
                eos_token_ids=eos,
                real_oracle=not args.skip_real_oracle,
                reference_schedule=args.reference_schedule,
            )
            with records_path.open("a") as file:
                file.write(json.dumps(record.to_json()) + "\n")
            analyses[record.key] = analyze(record, specs, profile)
            progress.update(1)
    progress.close()
    ordered = [analyses[key] for key in prompt_keys]
    bench = oracle_report.read_bench_jsonl(args.bench_jsonl) if args.bench_jsonl else None
    config = {
        "command": _command_line(),
        "pair": "smoke (tiny random fp32 Llama + perturbed copy)" if args.smoke else args.pair,
        "task": args.task,
        "prompts_file": args.prompts,
        "n": args.n,
        "seed": args.seed,
        "max_new_tokens": args.max_new_tokens,
        "dtype": "float32" if args.smoke else args.dtype,
        "threads": args.threads,
        "real_oracle": not args.skip_real_oracle,
        "reference_schedule": args.reference_schedule,
        "max_prompt_chars": args.max_prompt_chars,
        "bench_jsonl": args.bench_jsonl,
        "versions": library_versions(),
        "machine": machine_info(),
        "git": git_state(),
    }
    summary = oracle_report.build_summary(ordered, profile, config, bench)
    paths = oracle_report.write_report(summary, ordered, out)
    for path in paths:
        print(path)
    return 0


class _LazyModels:
    """Loads the pair (and tokenizer) only when a prompt has to be measured."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._pair: Any = None

    def _load(self) -> Any:
        if self._pair is None:
            if self.args.smoke:
                from dynaspec.models.tiny import TinyPairConfig, tiny_pair

                target, draft, tokenizer = tiny_pair(TinyPairConfig())
                self._pair = (target, draft, tokenizer)
            else:
                from dynaspec.models.loading import load_pair

                pair = load_pair(self.args.pair, dtype=self.args.dtype, threads=self.args.threads)
                self._pair = (pair.target, pair.draft, pair.tokenizer)
        return self._pair

    def pair(self) -> tuple[Any, Any]:
        target, draft, _ = self._load()
        return target, draft

    def eos(self) -> tuple[int, ...]:
        target, _, tokenizer = self._load()
        found = eos_ids(None, target)
        if not found and getattr(tokenizer, "eos_token_id", None) is not None:
            found = (int(tokenizer.eos_token_id),)
        return found

    def prompts(self, keys: Sequence[tuple[str, str]]) -> list[PromptInput]:
        """The input ids of the prompts named by `keys`, in that order."""
        if self.args.smoke:
            return [
                PromptInput(task, pid, _smoke_ids(task, pid, self.args.seed)) for task, pid in keys
            ]
        from dynaspec.eval.data import render_prompt, should_use_chat

        _, _, tokenizer = self._load()
        chat = should_use_chat(tokenizer)
        texts = {(p.task, p.id): p.text for p in _load_prompt_objects(self.args)}
        return [
            PromptInput(task, pid, render_prompt(tokenizer, texts[(task, pid)], chat=chat))
            for task, pid in keys
        ]


SMOKE_VOCAB = 256  # smoke prompts use byte tokens only (the tiny pair's vocabulary + EOS)


def _smoke_ids(task: str, prompt_id: str, seed: int) -> torch.Tensor:
    """A random (1, 8..16) byte-token prompt, reproducible from (task, id, seed)."""
    digest = sum((i + 1) * ord(c) for i, c in enumerate(f"{seed}/{task}/{prompt_id}"))
    generator = torch.Generator().manual_seed(digest)
    length = int(torch.randint(8, 17, (1,), generator=generator))
    return torch.randint(0, SMOKE_VOCAB, (1, length), generator=generator)


def _load_prompt_objects(args: argparse.Namespace) -> list[Any]:
    from dynaspec.eval.data import load_prompt_file, load_prompts

    if args.prompts:
        return load_prompt_file(args.prompts)[: args.n]
    return load_prompts(args.task, args.n, args.seed, max_prompt_chars=args.max_prompt_chars)


def _prompt_keys(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(task, id) of every prompt of the run, in run order (tasks interleaved)."""
    if args.smoke and not args.prompts:
        from dynaspec.eval.data import TASKS

        tasks = TASKS if args.task == "all" else (args.task,)
        return [(task, f"random/{i}") for i in range(args.n) for task in tasks]
    return [(p.task, p.id) for p in _load_prompt_objects(args)]


def _load_records(out: Path, args: argparse.Namespace) -> dict[tuple[str, str], PromptRecord]:
    path = out / RECORDS_FILE
    records: dict[tuple[str, str], PromptRecord] = {}
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        if line.strip():
            record = PromptRecord.from_json(json.loads(line))
            if record.max_new_tokens == args.max_new_tokens:
                records[record.key] = record
    return records


def _setup(args: argparse.Namespace) -> dict[str, Any]:
    """What must not change between a run and its --resume."""
    return {
        "pair": "smoke" if args.smoke else args.pair,
        "dtype": "float32" if args.smoke else args.dtype,
        "max_new_tokens": args.max_new_tokens,
    }


def _load_costs(out: Path, setup: dict[str, Any]) -> CostProfile | None:
    """The costs of an earlier run in `out`; ConfigError when it was made with another setup."""
    path = out / COSTS_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    if data.get("setup", setup) != setup:
        raise ConfigError(
            f"--resume: {out} holds a run with {data['setup']}, this one is {setup}: "
            "use another --out, or drop --resume to start afresh"
        )
    return CostProfile.from_json(data)


def _command_line() -> str:
    argv = [os.path.basename(sys.argv[0]) or "dynaspec", *sys.argv[1:]]
    return " ".join(shlex.quote(a) for a in argv)
