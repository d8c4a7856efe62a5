"""How often copied (prompt-lookup) tokens are accepted, learned online.

b(a) = P(a copied token is accepted | its source agrees with the text on the a tokens before
it); for the j-th token (0-based) of a copy whose match agreed on ell tokens, a = ell + j.
Counted per power-of-two bucket of a behind an optimistic prior, made non-decreasing in a,
with a prober for when the rule keeps declining: docs/design/adaptive.md ("Copied tokens'
acceptance"). Also the share of the tokens that no accepted copied token gave, which a
draft's start is repaid by (docs/design/adaptive.md, "Which source first").
"""

from __future__ import annotations

from dataclasses import dataclass

from dynaspec.core.round import Choice
from dynaspec.policies.isotonic import pool_adjacent_violators
from dynaspec.policies.prober import Prober

NUM_BUCKETS = 7  # agreements 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64+


@dataclass(frozen=True)
class LookupPrior:
    """The prior behind the learned acceptance of copied tokens."""

    # Prior acceptance of a copied token per agreement bucket (1, 2-3, 4-7, 8+). Measured
    # on the committed bench's prompts (offline, every position of the target's own output
    # of qwen2.5-coder-lookup-n3-2026-11-30, benchmarks/HISTORY.md; 4 tasks): 0.23, 0.47,
    # 0.77, 0.97-0.99, from 0.15 / 0.23 (open-ended) to 0.48 / 0.68 (summarization) for the
    # first two.
    # Long agreements are held at 0.9, short ones are not trusted before they are seen to pay.
    acceptance: tuple[float, ...] = (0.25, 0.45, 0.75, 0.9, 0.9, 0.9, 0.9)
    weight: float = 2.0  # pseudo-observations behind each prior
    # From this agreement on, the prior is raised to the draft model's continuation rate
    # (a_c) where that is higher: a copy of a long match and a draft that runs on both say
    # the text goes on as it has, and a long bucket, untried while the running draft wins,
    # would otherwise never learn (docs/design/adaptive.md, "Copied tokens' acceptance").
    borrow_from: int = 8
    probe_interval: int = 8  # declined matches before a probe copies one token anyway
    max_probe_interval: int = 128  # probes back off (doubling) up to this interval
    # The share of the tokens that copies do not give (what a draft's start is repaid by):
    # counted behind this many tokens that no copy gave, each round's weighed by
    # share_decay per round since.
    share_weight: float = 4.0
    share_decay: float = 0.9


def agreement_bucket(agreement: int) -> int:
    """0 for an agreement of 1 token, 1 for 2-3, 2 for 4-7, ... up to NUM_BUCKETS - 1."""
    return min(max(agreement, 1).bit_length() - 1, NUM_BUCKETS - 1)


class LookupAcceptance:
    """Counts of accepted copied tokens per agreement bucket, and the copy's prober."""

    def __init__(self, prior: LookupPrior | None = None) -> None:
        self.prior = prior or LookupPrior()
        self.accepted = [0.0] * NUM_BUCKETS
        self.total = [0.0] * NUM_BUCKETS  # known outcomes per bucket
        self.prober = Prober(self.prior.probe_interval, self.prior.max_probe_interval)
        self.emitted = 0.0  # tokens the rounds emitted (decayed: `learn_share`)
        self.copied = 0.0  # of those, copied tokens the target accepted (decayed)

    def rates(self, borrowed: float = 0.0) -> list[float]:
        """b per bucket: each bucket's rate behind its prior (from `borrow_from` on, at least
        `borrowed`: the draft model's continuation rate), made non-decreasing by pooling
        neighbours that violate the order (weighted by their observations)."""
        weight, first = self.prior.weight, agreement_bucket(self.prior.borrow_from)
        prior = [
            max(b, borrowed) if bucket >= first else b
            for bucket, b in enumerate(self.prior.acceptance)
        ]
        sums = [accepted + weight * b for accepted, b in zip(self.accepted, prior, strict=True)]
        return pool_adjacent_violators(sums, [total + weight for total in self.total])

    def acceptance(self, agreement: int, position: int, borrowed: float = 0.0) -> float:
        """b(ell + j) for a match agreeing on ell tokens and the 0-based position j."""
        return self.rates(borrowed)[agreement_bucket(agreement + position)]

    def prefix_probs(self, agreement: int, count: int, borrowed: float = 0.0) -> list[float]:
        """Q_1 .. Q_count: the probability that the first j copied tokens are all accepted
        (`borrowed`: as in `rates`)."""
        rates, prefix, probs = self.rates(borrowed), 1.0, []
        for position in range(count):
            prefix *= rates[agreement_bucket(agreement + position)]
            probs.append(prefix)
        return probs

    def choose(self, copied: int) -> tuple[int, Choice]:
        """The tokens to copy after the rule chose `copied`, and the choice its prober learns
        in `learn`: 1 for a due probe when the rule chose none."""
        if copied:
            return copied, Choice.CHOSEN
        if self.prober.due(counting_this=True):
            return 1, Choice.PROBED
        return 0, Choice.DECLINED

    def learn(self, agreement: int, num_copied: int, num_accepted: int) -> None:
        """One round that proposed `num_copied` copied tokens first; the target accepted
        `num_accepted` drafted tokens (copied ones and any after them)."""
        for position in range(min(num_copied, num_accepted + 1)):
            bucket = agreement_bucket(agreement + position)
            self.accepted[bucket] += float(position < num_accepted)
            self.total[bucket] += 1.0

    def learn_share(self, emitted: int, copied: int) -> None:
        """A round emitted `emitted` tokens, `copied` of them copied tokens the target
        accepted (0 where it copied nothing)."""
        decay = self.prior.share_decay
        self.emitted = decay * self.emitted + emitted
        self.copied = decay * self.copied + copied

    def uncopied_share(self) -> float:
        """Of the tokens the rounds emitted, the share that no accepted copied token gave,
        behind `share_weight` such tokens (1.0 while nothing is copied): the share of the
        tokens left a draft model would have to give."""
        weight = self.prior.share_weight
        return (self.emitted - self.copied + weight) / (self.emitted + weight)
