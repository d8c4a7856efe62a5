"""Lookahead policies: how many tokens the draft proposes in a round.

Every policy implements the same small protocol, so the decoding loop never changes when
a policy is added:

    reset()                 forget everything learned (called once per generate() unless
                            the caller passes its own policy object to carry state over)
    max_lookahead(catchup, remaining)
                            the most tokens to draft this round (0: no drafting at all);
                            catchup = tokens the draft must be fed before its first
                            proposal (1 when it is in step, more after rounds without
                            drafting, the whole prompt in the first round); remaining =
                            the most tokens the call can still emit (None: unknown)
    should_stop(step)       after drafting one token: stop drafting now? (the token is kept
                            and sent to the target for checking)
    update(result)          learn from the finished round

A policy only changes how many tokens are drafted, never which tokens are accepted, so
every policy is exactly as lossless as the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from dynaspec.config import SpecConfig
from dynaspec.errors import ConfigError


@dataclass(frozen=True)
class DraftStep:
    """What the loop knows right after the draft proposed one token."""

    index: int  # 0-based index of this token within the round's draft
    position: int  # index the token would take in the committed token sequence
    token: int  # the proposed token id
    confidence: float  # draft's processed probability of `token`


@dataclass(frozen=True)
class RoundResult:
    """What a policy learns from one finished round."""

    num_drafted: int  # tokens the draft proposed
    num_accepted: int  # of those, the prefix the target accepted
    confidences: tuple[float, ...]  # draft probability of each drafted token
    draft_time_s: float  # wall time in draft forwards this round (catch-up included)
    target_time_s: float  # wall time of the target's verification forward
    num_verified: int  # tokens in the target's verification forward (num_drafted + 1 usually)
    draft_forwards: int  # draft forward calls this round
    draft_catchup: int = 0  # tokens fed to the draft's first forward (>1: it was behind)


@runtime_checkable
class LookaheadPolicy(Protocol):
    """The protocol every lookahead policy implements (see the module docstring)."""

    name: str
    stop_reason: str  # recorded in the stats when should_stop() returns True

    def reset(self) -> None: ...

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int: ...

    def should_stop(self, step: DraftStep) -> bool: ...

    def update(self, result: RoundResult) -> None: ...


class ConstantPolicy:
    """Always draft `num_assistant_tokens` tokens."""

    name = "constant"
    stop_reason = "max"

    def __init__(self, num_assistant_tokens: int = 5) -> None:
        self.num_assistant_tokens = num_assistant_tokens

    def reset(self) -> None:
        pass

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.num_assistant_tokens

    def should_stop(self, step: DraftStep) -> bool:
        return False

    def update(self, result: RoundResult) -> None:
        pass


class HeuristicPolicy:
    """transformers' heuristic: +2 after a round with every drafted token accepted, else -1.

    Starts at `num_assistant_tokens`, never goes below 1, and (as in transformers) has no
    upper bound other than the length limit. State lives here, never on a model config.
    """

    name = "heuristic"
    stop_reason = "max"

    def __init__(self, num_assistant_tokens: int = 5) -> None:
        self.initial = num_assistant_tokens
        self.lookahead = num_assistant_tokens

    def reset(self) -> None:
        self.lookahead = self.initial

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.lookahead

    def should_stop(self, step: DraftStep) -> bool:
        return False

    def update(self, result: RoundResult) -> None:
        if result.num_drafted == 0:
            return
        if result.num_accepted == result.num_drafted:
            self.lookahead += 2
        else:
            self.lookahead = max(1, self.lookahead - 1)


class DynamicPolicy:
    """Dynamic speculation lookahead (Mamou et al. 2024, "Dynamic Speculation Lookahead
    Accelerates Speculative Decoding of Large Language Models"): draft up to
    `num_assistant_tokens`, stopping as soon as the draft's probability of the token it just
    proposed is below `threshold`. A threshold of 0 turns the stop off.
    """

    name = "dynamic"
    stop_reason = "confidence"

    def __init__(self, num_assistant_tokens: int = 20, threshold: float = 0.4) -> None:
        self.num_assistant_tokens = num_assistant_tokens
        self.threshold = threshold

    def reset(self) -> None:
        pass

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.num_assistant_tokens

    def should_stop(self, step: DraftStep) -> bool:
        return step.confidence < self.threshold

    def update(self, result: RoundResult) -> None:
        pass


class OraclePolicy:
    """Draft until the first disagreement with a known target output (analysis only).

    `reference` is the full token sequence (prompt + new tokens) the target produces alone
    with greedy decoding. The draft stops right after proposing a token that differs from
    the reference, so each round drafts the oracle lookahead: the agreeing run plus one.
    """

    name = "oracle"
    stop_reason = "oracle"

    def __init__(self, reference: Sequence[int], max_tokens: int = 64) -> None:
        self.reference = list(reference)
        self.max_tokens = max_tokens

    def reset(self) -> None:
        pass

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.max_tokens

    def should_stop(self, step: DraftStep) -> bool:
        if step.position >= len(self.reference):
            return True
        return step.token != self.reference[step.position]

    def update(self, result: RoundResult) -> None:
        pass


def make_policy(config: SpecConfig) -> LookaheadPolicy:
    """A fresh policy for a schedule name, configured from `config`."""
    schedule = config.num_assistant_tokens_schedule
    k = config.num_assistant_tokens
    if schedule == "constant":
        return ConstantPolicy(k)
    if schedule in ("heuristic", "heuristic_transient"):
        return HeuristicPolicy(k)
    if schedule == "dynamic":
        return DynamicPolicy(k, config.assistant_confidence_threshold)
    if schedule == "adaptive":
        from dynaspec.adaptive import AdaptivePolicy

        return AdaptivePolicy(max_tokens=k)
    raise ConfigError(f"unknown num_assistant_tokens_schedule {schedule!r}")
