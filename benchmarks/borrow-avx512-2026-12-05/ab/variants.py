"""Variants for this session's A/Bs, on dynaspec with the borrow in src (447e1e8).

- base: as before the borrow (long buckets on their prior of 0.9 until observed).
- borrow: the code as it is (long buckets' prior raised to a_c where that is higher).
- split: borrow, with a copy's first token learned apart from the tokens after it (a fresh
  match at agreement a is not a copy that has run on to a): a table per bucket of first
  tokens only (same priors), the code's table of the later positions only.
"""

import dataclasses

from dynaspec.policies import lookup_acceptance as L
from dynaspec.policies.isotonic import pool_adjacent_violators

_init = L.LookupAcceptance.__init__
_learn = L.LookupAcceptance.learn
_prefix = L.LookupAcceptance.prefix_probs
_active = {"name": "borrow"}


def _init_variant(self, prior=None):
    _init(self, prior)
    self.first_accepted = [0.0] * L.NUM_BUCKETS
    self.first_total = [0.0] * L.NUM_BUCKETS
    if _active["name"] == "base":
        self.prior = dataclasses.replace(self.prior, borrow_from=10**6)


def _learn_variant(self, agreement, num_copied, num_accepted):
    if _active["name"] != "split":
        return _learn(self, agreement, num_copied, num_accepted)
    if num_copied:
        bucket = L.agreement_bucket(agreement)
        self.first_accepted[bucket] += float(num_accepted > 0)
        self.first_total[bucket] += 1.0
    for position in range(1, min(num_copied, num_accepted + 1)):
        bucket = L.agreement_bucket(agreement + position)
        self.accepted[bucket] += float(position < num_accepted)
        self.total[bucket] += 1.0


def _first_rates(self, borrowed):
    weight, first = self.prior.weight, L.agreement_bucket(self.prior.borrow_from)
    prior = [max(b, borrowed) if i >= first else b for i, b in enumerate(self.prior.acceptance)]
    sums = [a + weight * b for a, b in zip(self.first_accepted, prior, strict=True)]
    return pool_adjacent_violators(sums, [t + weight for t in self.first_total])


def _prefix_variant(self, agreement, count, borrowed=0.0):
    if _active["name"] != "split":
        return _prefix(self, agreement, count, borrowed)
    later, prefix, probs = self.rates(borrowed), 1.0, []
    for position in range(count):
        if position == 0:
            prefix *= _first_rates(self, borrowed)[L.agreement_bucket(agreement)]
        else:
            prefix *= later[L.agreement_bucket(agreement + position)]
        probs.append(prefix)
    return probs


L.LookupAcceptance.__init__ = _init_variant
L.LookupAcceptance.learn = _learn_variant
L.LookupAcceptance.prefix_probs = _prefix_variant


def use(name: str) -> None:
    _active["name"] = name
