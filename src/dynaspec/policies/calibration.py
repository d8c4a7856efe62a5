"""The draft model's calibration: the probability that a drafted token is accepted, from the
draft's confidence in it, learned from finished rounds (docs/design/adaptive.md ("Estimates"))."""

from __future__ import annotations

from collections.abc import Sequence

from dynaspec.policies.isotonic import pool_adjacent_violators


class Calibration:
    """Accepted counts per confidence bin behind the prior that the draft is calibrated, made
    non-decreasing; and the acceptance of a round's first drafted token, and of each after it
    given the one before accepted, behind an optimistic prior."""

    def __init__(self, bins: int, prior_weight: float, first_prior: float) -> None:
        self.bins = bins
        self.prior_weight = prior_weight  # pseudo-observations behind each prior
        self.first_prior = first_prior  # prior acceptance of a round's first drafted token
        self.bin_accepted = [0.0] * bins  # observed accepted tokens per confidence bin
        self.bin_total = [0.0] * bins  # observed tokens with a known outcome per bin
        self.first_accepted = 0.0  # first drafted tokens accepted
        self.first_total = 0.0  # first drafted tokens with a known outcome
        self.later_accepted = 0.0  # drafted tokens after a round's first, accepted
        self.later_total = 0.0  # those with a known outcome (the token before accepted)
        self._fit: list[float] | None = None  # cached, None when stale

    def acceptance(self, confidence: float) -> float:
        """Calibrated probability that a drafted token with this confidence is accepted."""
        if self._fit is None:
            weight = self.prior_weight
            priors = [(b + 0.5) / self.bins for b in range(self.bins)]
            sums = [a + weight * p for a, p in zip(self.bin_accepted, priors, strict=True)]
            self._fit = pool_adjacent_violators(sums, [t + weight for t in self.bin_total])
        return self._fit[min(int(confidence * self.bins), self.bins - 1)]

    def first_token_acceptance(self) -> float:
        """a_1 before a round: the observed first-token acceptance behind the prior (which is
        optimistic, so that a fresh policy tries drafting, and learns)."""
        weight = self.prior_weight
        return (self.first_accepted + self.first_prior * weight) / (self.first_total + weight)

    def continuation_acceptance(self) -> float:
        """A drafted token's acceptance given that the one before it was accepted, before its
        confidence is seen: the observed rate behind the same prior as the first token's. A
        draft that stumbles on its first token is often right for many after it (a quote
        summary: 0 of 2 first tokens, then 14 of 14 in a row)."""
        weight = self.prior_weight
        return (self.later_accepted + self.first_prior * weight) / (self.later_total + weight)

    def learn(self, num_drafted: int, num_accepted: int, confidences: Sequence[float]) -> None:
        """One round of the draft model's tokens: the tokens up to and including the first
        rejection have a known outcome."""
        known = min(num_drafted, num_accepted + 1)
        if known:
            self.first_total += 1
            self.first_accepted += num_accepted > 0
            self.later_total += known - 1
            self.later_accepted += max(min(num_accepted, known) - 1, 0)
        for index in range(known):
            b = min(int(confidences[index] * self.bins), self.bins - 1)
            self.bin_total[b] += 1
            self.bin_accepted[b] += index < num_accepted
        self._fit = None
