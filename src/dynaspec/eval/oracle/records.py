"""What the oracle analysis records per prompt (one JSONL line each) and the replays made
from it; see dynaspec.eval.oracle for how each field is measured."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dynaspec.core.round import DraftPlan, Round, StopReason

ORACLE = "oracle"  # method name of the oracle policy in every table


def censored_round(record: Round) -> bool:
    """True when drafting stopped before the draft's first wrong token was seen (cut by
    max_new_tokens, EOS or a cap): the true agreeing run is >= `num_accepted`."""
    return record.stop_reason != ORACLE or record.num_emitted < record.num_accepted + 1


def round_row(record: Round, with_confidences: bool = False) -> list[Any]:
    """The round as a compact JSON row: drafted, accepted, emitted, stop reason, draft
    forwards (and confidences)."""
    row: list[Any] = [record.num_drafted, record.num_accepted, record.num_emitted]
    row += [record.stop_reason.value, record.draft_forwards]
    if with_confidences:
        row.append([round(c, 5) for c in record.confidences])
    return row


def round_from_row(row: Sequence[Any]) -> Round:
    """The round of a row written by `round_row` (what it does not hold is zero)."""
    confidences = tuple(float(c) for c in row[5]) if len(row) > 5 else ()
    drafted = int(row[0])
    return Round(
        plan=DraftPlan(model=drafted),
        stop_reason=StopReason(str(row[3])),
        num_drafted=drafted,
        num_copied=0,
        num_accepted=int(row[1]),
        num_emitted=int(row[2]),
        num_verified=drafted + 1,
        agreement=0,
        catchup=0,
        draft_forwards=int(row[4]),
        confidences=confidences,
        draft_time_s=0.0,
        target_time_s=0.0,
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
    real_oracle: tuple[Round, ...] | None  # rounds of the real oracle run (None: skipped)
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
            else [round_row(r, with_confidences=True) for r in self.real_oracle],
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
            real_oracle=None if real is None else tuple(round_from_row(r) for r in real),
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
    replays: dict[str, tuple[Round, ...]] = field(default_factory=dict)  # method -> rounds

    @property
    def oracle_rounds(self) -> tuple[Round, ...]:
        """The oracle's rounds: the real run's when it was made, else the replay's."""
        if self.record.real_oracle is not None:
            return self.record.real_oracle
        return self.replays[ORACLE]

    @property
    def replay_consistent(self) -> bool | None:
        """The replayed oracle run has the real one's rounds (drafted, accepted), in order."""
        if self.record.real_oracle is None or ORACLE not in self.replays:
            return None
        real = [(r.num_drafted, r.num_accepted) for r in self.record.real_oracle]
        return real == [(r.num_drafted, r.num_accepted) for r in self.replays[ORACLE]]

    def first_inconsistent_round(self) -> int | None:
        """Index of the first round where the replayed and real oracle differ (None: none)."""
        if self.record.real_oracle is None or ORACLE not in self.replays:
            return None
        real, replayed = self.record.real_oracle, self.replays[ORACLE]
        for index, (a, b) in enumerate(zip(real, replayed, strict=False)):
            if (a.num_drafted, a.num_accepted) != (b.num_drafted, b.num_accepted):
                return index
        return None if len(real) == len(replayed) else min(len(real), len(replayed))
