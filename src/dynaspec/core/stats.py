"""Per-round records and the generation summary. Every formula lives here, once."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from dynaspec.core.round import Round

# The per-round record is the round's own value (core/round.py); the old name stays.
RoundRecord = Round


@dataclass(frozen=True)
class Summary:
    """Totals over a generation; see GenerationStats.summary() for the formulas."""

    new_tokens: int
    rounds: int
    mean_accepted_per_round: float
    acceptance_rate: float
    draft_forwards: int
    target_forwards: int
    wall_time_s: float
    tokens_per_s: float
    draft_time_s: float
    target_time_s: float
    other_time_s: float
    overhead_per_round_s: float
    processors: tuple[str, ...] = ()  # active logits processors, warpers, stopping criteria
    do_sample: bool = False  # sampled (True) or greedy (False)
    num_drafted: int = 0  # tokens proposed over all rounds (copied ones included)
    num_accepted: int = 0  # of those, accepted
    num_copied: int = 0  # of the drafted, copied by prompt lookup

    def line(self) -> str:
        """One human-readable stats line."""
        active = f" | {'sampling' if self.do_sample else 'greedy'}"
        if self.processors:
            active += f", processors: {', '.join(self.processors)}"
        return (
            f"{self.new_tokens} tokens in {self.wall_time_s:.2f}s ({self.tokens_per_s:.1f} tok/s)"
            f" | {self.rounds} rounds, {self.mean_accepted_per_round:.2f} accepted/round,"
            f" acceptance {self.acceptance_rate:.0%}"
            f" | forwards: target {self.target_forwards}, draft {self.draft_forwards}"
            f" | time: target {self.target_time_s:.2f}s, draft {self.draft_time_s:.2f}s,"
            f" other {self.other_time_s:.3f}s{active}"
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class GenerationStats:
    """Records of every round of one generate() call."""

    prompt_tokens: int = 0
    rounds: list[Round] = field(default_factory=list)
    wall_time_s: float = 0.0  # the whole call, from validation to the last token
    # transformers class names (suffix dropped) of the logits processors, warpers and stopping
    # criteria active in the call, in the order they ran (EOS and length are always checked)
    processors: tuple[str, ...] = ()
    do_sample: bool = False  # whether tokens were sampled (else greedy)
    # Target forwards of the call when they are not one per round: a batch's rounds are
    # every row's, and one forward checks all rows (None: one per round)
    target_forwards: int | None = None

    def summary(self) -> Summary:
        """Aggregates, with these definitions:

        new_tokens = sum of num_emitted; num_drafted, num_accepted, num_copied: the sums
        mean_accepted_per_round = sum(num_accepted) / rounds  (drafted tokens kept per round;
            the target adds one token of its own each round)
        acceptance_rate = sum(num_accepted) / sum(num_drafted)  (0 when nothing was drafted)
        target_forwards = rounds  (exactly one target forward per round; for a batch, the
            forwards of the call, each checking every row still going)
        tokens_per_s = new_tokens / wall_time_s
        overhead_per_round_s = median over rounds of other_time_s (time outside forwards)
        """
        rounds = len(self.rounds)
        drafted = sum(r.num_drafted for r in self.rounds)
        accepted = sum(r.num_accepted for r in self.rounds)
        new_tokens = sum(r.num_emitted for r in self.rounds)
        other = [r.other_time_s for r in self.rounds]
        return Summary(
            new_tokens=new_tokens,
            rounds=rounds,
            mean_accepted_per_round=accepted / rounds if rounds else 0.0,
            acceptance_rate=accepted / drafted if drafted else 0.0,
            draft_forwards=sum(r.draft_forwards for r in self.rounds),
            target_forwards=rounds if self.target_forwards is None else self.target_forwards,
            wall_time_s=self.wall_time_s,
            tokens_per_s=new_tokens / self.wall_time_s if self.wall_time_s > 0 else 0.0,
            draft_time_s=sum(r.draft_time_s for r in self.rounds),
            target_time_s=sum(r.target_time_s for r in self.rounds),
            other_time_s=sum(other),
            overhead_per_round_s=statistics.median(other) if other else 0.0,
            processors=self.processors,
            do_sample=self.do_sample,
            num_drafted=drafted,
            num_accepted=accepted,
            num_copied=sum(r.num_copied for r in self.rounds),
        )
