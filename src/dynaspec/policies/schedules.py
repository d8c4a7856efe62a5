"""The simple schedules: constant, heuristic, dynamic, and the oracle (analysis only)."""

from __future__ import annotations

from collections.abc import Sequence

from dynaspec.core.round import DraftStep, Round, StopReason
from dynaspec.policies.base import Schedule


class ConstantPolicy(Schedule):
    """Always draft `num_assistant_tokens` tokens."""

    name = "constant"
    needs_confidence = False  # drafts the whole lookahead: no token is read back early

    def __init__(self, num_assistant_tokens: int = 5) -> None:
        self.num_assistant_tokens = num_assistant_tokens

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.num_assistant_tokens


class HeuristicPolicy(Schedule):
    """transformers' heuristic: +2 after a round with every drafted token accepted, else -1.

    Starts at `num_assistant_tokens`, never goes below 1, and (as in transformers) has no
    upper bound other than the length limit. State lives here, never on a model config.
    """

    name = "heuristic"
    needs_confidence = False  # drafts the whole lookahead: no token is read back early

    def __init__(self, num_assistant_tokens: int = 5) -> None:
        self.initial = num_assistant_tokens
        self.lookahead = num_assistant_tokens

    def reset(self) -> None:
        self.lookahead = self.initial

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.lookahead

    def update(self, round: Round) -> None:
        if round.num_drafted == 0:
            return
        if round.num_accepted == round.num_drafted:
            self.lookahead += 2
        else:
            self.lookahead = max(1, self.lookahead - 1)


class DynamicPolicy(Schedule):
    """Dynamic speculation lookahead (Mamou et al. 2024, "Dynamic Speculation Lookahead
    Accelerates Speculative Decoding of Large Language Models"): draft up to
    `num_assistant_tokens`, stopping as soon as the draft's probability of the token it just
    proposed is below `threshold`. A threshold of 0 turns the stop off.
    """

    name = "dynamic"
    stop_reason = StopReason.CONFIDENCE
    needs_confidence = True

    def __init__(self, num_assistant_tokens: int = 20, threshold: float = 0.4) -> None:
        self.num_assistant_tokens = num_assistant_tokens
        self.threshold = threshold

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.num_assistant_tokens

    def should_stop(self, step: DraftStep) -> bool:
        return step.confidence < self.threshold


class OraclePolicy(Schedule):
    """Draft until the first disagreement with a known target output (analysis only).

    `reference` is the full token sequence (prompt + new tokens) the target produces alone
    with greedy decoding. The draft stops right after proposing a token that differs from
    the reference, so each round drafts the oracle lookahead: the agreeing run plus one.
    """

    name = "oracle"
    stop_reason = StopReason.ORACLE
    needs_confidence = True

    def __init__(self, reference: Sequence[int], max_tokens: int = 64) -> None:
        self.reference = list(reference)
        self.max_tokens = max_tokens

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.max_tokens

    def should_stop(self, step: DraftStep) -> bool:
        if step.position >= len(self.reference):
            return True
        return step.token != self.reference[step.position]
