"""How often copied (prompt-lookup) tokens are accepted, learned online.

b(ell, j) = P(copied token j is accepted | tokens 1 .. j-1 of the copy were), for a match
that agrees on ell tokens back from the newest one. ell is bucketed by powers of two (1,
2-3, 4-7, ..., 32+): a longer agreement is a stronger sign that the text is being copied.
Each (bucket, j) counts the copied tokens whose outcome is known (up to and including the
first rejection) behind a prior: the bucket's pooled rate over all positions, itself behind
an optimistic prior (0.8, as for the draft model's first token, so that a fresh policy
tries copying and learns). When the rule keeps declining to copy, a probe copies one token
now and then (each probe waiting twice as long as the last, as the draft model's probes do),
so that a noisy early estimate cannot switch copying off for good. See
policies/source_plan.py for how the policy uses it.
"""

from __future__ import annotations

from dataclasses import dataclass

NUM_BUCKETS = 6  # match lengths 1, 2-3, 4-7, 8-15, 16-31, 32+


@dataclass(frozen=True)
class LookupPrior:
    """The prior behind the learned acceptance of copied tokens."""

    acceptance: float = 0.8  # prior acceptance of a copied token (optimistic: it explores)
    weight: float = 2.0  # pseudo-observations behind each prior
    probe_interval: int = 8  # declined matches before a probe copies one token anyway
    max_probe_interval: int = 128  # probes back off (doubling) up to this interval


def match_bucket(match_length: int) -> int:
    """0 for a 1-token match, 1 for 2-3, 2 for 4-7, ... up to NUM_BUCKETS - 1."""
    return min(max(match_length, 1).bit_length() - 1, NUM_BUCKETS - 1)


class LookupAcceptance:
    """Counts of accepted copied tokens per (match-length bucket, position in the copy)."""

    def __init__(self, prior: LookupPrior | None = None) -> None:
        self.prior = prior or LookupPrior()
        self.accepted: dict[tuple[int, int], float] = {}  # (bucket, j) -> accepted
        self.total: dict[tuple[int, int], float] = {}  # (bucket, j) -> known outcomes
        self.bucket_accepted = [0.0] * NUM_BUCKETS
        self.bucket_total = [0.0] * NUM_BUCKETS
        self.declined = 0  # matches declined since the last copy
        self.probe_interval = self.prior.probe_interval

    def acceptance(self, match_length: int, position: int) -> float:
        """b(ell, j) for the 0-based position j in the copy."""
        bucket = match_bucket(match_length)
        weight = self.prior.weight
        pooled = self.bucket_accepted[bucket] + weight * self.prior.acceptance
        pooled /= self.bucket_total[bucket] + weight
        key = (bucket, position)
        return (self.accepted.get(key, 0.0) + weight * pooled) / (self.total.get(key, 0.0) + weight)

    def prefix_probs(self, match_length: int, count: int) -> list[float]:
        """Q_1 .. Q_count: the probability that the first j copied tokens are all accepted."""
        probs, prefix = [], 1.0
        for position in range(count):
            prefix *= self.acceptance(match_length, position)
            probs.append(prefix)
        return probs

    def probe(self, copied: int) -> int:
        """The tokens to copy after the rule chose `copied`: 1 for a due probe when it chose
        none (then the next probe waits twice as long), else `copied`."""
        if copied:
            self.declined, self.probe_interval = 0, self.prior.probe_interval
            return copied
        self.declined += 1
        if self.declined < self.probe_interval:
            return 0
        self.declined = 0
        self.probe_interval = min(2 * self.probe_interval, self.prior.max_probe_interval)
        return 1

    def learn(self, match_length: int, num_copied: int, num_accepted: int) -> None:
        """One round that proposed `num_copied` copied tokens first; the target accepted
        `num_accepted` drafted tokens (copied ones and any after them)."""
        bucket = match_bucket(match_length)
        for position in range(min(num_copied, num_accepted + 1)):
            key = (bucket, position)
            accepted = float(position < num_accepted)
            self.accepted[key] = self.accepted.get(key, 0.0) + accepted
            self.total[key] = self.total.get(key, 0.0) + 1.0
            self.bucket_accepted[bucket] += accepted
            self.bucket_total[bucket] += 1.0
