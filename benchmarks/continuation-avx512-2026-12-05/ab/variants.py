"""The planner variants of this folder's A/Bs, patched onto dynaspec at d07d7e1 or later
(`use(name)` before each generation; ab3.py calls it).

- base: the code as it is (d07d7e1: the draft's tokens after its first at a_c; from 447e1e8
  on, with long copies' prior raised to a_c, which `prefix_probs` gets as `borrowed`).
- first: every drafted token valued at a_1, as before d07d7e1. The `*-first-vs-continuation`
  logs were run before d07d7e1 with the same two valuations, named `base` (a_1) and `cont`
  (a_c) there.
- p97: base, with long copies' prior (agreements of 8 and more) at 0.97 instead of 0.9.
- pool: base, with a copy's tokens after its first at the greater of their bucket's rate and
  a pooled rate of every copied token after a round's first (prior 0.9, weight 2).
"""

import dataclasses

from dynaspec.policies import adaptive as A
from dynaspec.policies import lookup_acceptance as L

_model_value = A.AdaptivePolicy.model_value
_prefix_probs = L.LookupAcceptance.prefix_probs
_learn = L.LookupAcceptance.learn
_init = L.LookupAcceptance.__init__
_active = {"name": "base"}


def _model_value_first(self, prefix=1.0, offset=0, rows=1.0, floor=1.0, width=1, rate=None):
    """`model_value` with a_c replaced by a_1 for the duration of the call."""
    self.calibration.continuation_acceptance = self.calibration.first_token_acceptance
    try:
        return _model_value(self, prefix, offset, rows, floor, width, rate)
    finally:
        del self.calibration.continuation_acceptance  # the class's method again


def _init_p97(self, prior=None):
    _init(self, prior)
    if _active["name"] == "p97":
        acceptance = tuple(a if i < 3 else 0.97 for i, a in enumerate(self.prior.acceptance))
        self.prior = dataclasses.replace(self.prior, acceptance=acceptance)


def _prefix_probs_pool(self, agreement, count, borrowed=0.0):
    if _active["name"] != "pool":
        return _prefix_probs(self, agreement, count, borrowed)
    rates, prefix, probs = self.rates(borrowed), 1.0, []
    weight = self.prior.weight
    pooled = (getattr(self, "pooled_accepted", 0.0) + 0.9 * weight) / (
        getattr(self, "pooled_total", 0.0) + weight
    )
    for position in range(count):
        rate = rates[L.agreement_bucket(agreement + position)]
        prefix *= max(rate, pooled) if position else rate
        probs.append(prefix)
    return probs


def _learn_pool(self, agreement, num_copied, num_accepted):
    _learn(self, agreement, num_copied, num_accepted)
    known = min(num_copied, num_accepted + 1)
    self.pooled_total = getattr(self, "pooled_total", 0.0) + max(known - 1, 0)
    self.pooled_accepted = getattr(self, "pooled_accepted", 0.0) + max(
        min(num_accepted, known) - 1, 0
    )


L.LookupAcceptance.__init__ = _init_p97
L.LookupAcceptance.prefix_probs = _prefix_probs_pool
L.LookupAcceptance.learn = _learn_pool


def use(name: str) -> None:
    """Make `name` the variant of the next generations ("model" and "hf" run base's code)."""
    _active["name"] = name
    A.AdaptivePolicy.model_value = _model_value_first if name == "first" else _model_value
