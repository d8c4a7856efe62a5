"""Step 4 of the oracle analysis (dynaspec.eval.oracle): `ReplayTarget` and `ReplayDraft`
replay a PromptRecord at no model cost, and the decoding loop runs over them with every
policy. `SimulatedTimePolicy` hands a policy the cost model's times instead of measured ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dynaspec.core.protocols import LookaheadPolicy, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, Round
from dynaspec.errors import InputError
from dynaspec.eval.cost_model import CostProfile
from dynaspec.eval.oracle.methods import PolicyFactory, PolicySpec, default_policy_specs
from dynaspec.eval.oracle.records import DraftTrace, PromptAnalysis, PromptRecord
from dynaspec.generation import generate


def confident_logits(token: int, confidence: float, vocab_size: int) -> torch.Tensor:
    """(V,) logits whose softmax gives `token` probability `confidence`, the rest evenly.

    `confidence` is clamped to [1/V, 1]: an argmax always has at least 1/V.
    """
    confidence = min(max(confidence, 1.0 / vocab_size), 1.0)
    rest = (1.0 - confidence) / (vocab_size - 1)
    if rest >= confidence:  # confidence == 1/V: keep `token` the strict argmax
        rest = confidence * (1.0 - 1e-4)
    # A finite floor, not -inf: the loop refuses non-finite logits from any model.
    floor = torch.finfo(torch.float32).min
    logits = torch.full((vocab_size,), math.log(rest) if rest > 0 else floor)  # (V,)
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
    after the draft's first wrong token (see dynaspec.eval.oracle). Past the trace's end the
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

    def reset(self) -> None:
        self.inner.reset()

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        return self.inner.plan(options, remaining)

    def stopper(self, plan: DraftPlan) -> Stopper:
        return self.inner.stopper(plan)

    def update(self, round: Round) -> None:
        profile = self.profile
        draft_time = round.draft_forwards * profile.draft_token_s
        target_time = profile.verify_time(round.num_verified)
        if profile.target_prefill_token_s > 0:  # catch-ups cost like the prefill
            if round.num_verified > round.num_drafted + 1:
                target_time = round.num_verified * profile.target_prefill_token_s
            if round.draft_forwards and round.catchup > 2:
                draft_time += round.catchup * profile.draft_prefill_token_s
                draft_time -= profile.draft_token_s
        self.inner.update(
            dataclasses.replace(round, draft_time_s=draft_time, target_time_s=target_time)
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
) -> tuple[Round, ...]:
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
            "reproduce the reference: a bug in dynaspec.eval.oracle.replay, please report it"
        )
    return tuple(out.stats.rounds)


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
