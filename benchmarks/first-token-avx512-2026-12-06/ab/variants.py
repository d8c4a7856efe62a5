"""Variants for this folder's A/Bs: how the adaptive stopper prices a round's first token of
the draft model.

- code: dynaspec as committed: every drafted token's acceptance from one calibration over
  all of them (confidence bins, `policies/calibration.py`).
- first: the round's first model token priced by a calibration of first tokens alone (per
  confidence bin, behind the pooled fit as a prior of `prior_weight` observations); the
  tokens after it as before.
"""

from dynaspec.policies import adaptive, calibration

_active = {"name": "code"}
_learn = calibration.Calibration.learn
_stop = adaptive.CostStopper.should_stop


def _first_fit(cal, confidence):
    """A first token's acceptance at this confidence: its bin's first tokens, behind the
    pooled fit."""
    b = min(int(confidence * cal.bins), cal.bins - 1)
    acc = getattr(cal, "first_bin_accepted", [0.0] * cal.bins)
    tot = getattr(cal, "first_bin_total", [0.0] * cal.bins)
    w = cal.prior_weight
    return (acc[b] + w * cal.acceptance(confidence)) / (tot[b] + w)


def learn(self, num_drafted, num_accepted, confidences):
    _learn(self, num_drafted, num_accepted, confidences)
    if not hasattr(self, "first_bin_accepted"):
        self.first_bin_accepted, self.first_bin_total = [0.0] * self.bins, [0.0] * self.bins
    if min(num_drafted, num_accepted + 1):  # the first token's outcome is known
        b = min(int(confidences[0] * self.bins), self.bins - 1)
        self.first_bin_total[b] += 1
        self.first_bin_accepted[b] += num_accepted > 0


def should_stop(self, step):
    first = not getattr(self, "_seen", False)
    self._seen = True
    if not (first and _active["name"] == "first"):
        return _stop(self, step)
    cal = self.policy.calibration
    self.prefix *= _first_fit(cal, step.confidence)
    return self.prefix * cal.acceptance(step.confidence) <= self.policy.threshold(step.index + 1)


calibration.Calibration.learn = learn
adaptive.CostStopper.should_stop = should_stop


def use(name: str) -> None:
    _active["name"] = name if name == "first" else "code"
