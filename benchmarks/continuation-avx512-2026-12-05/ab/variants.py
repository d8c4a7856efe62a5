from dynaspec.policies import source_plan as S, adaptive as A
orig_plan = S.plan_with_copy
orig_learn = A.AdaptivePolicy.learn_tokens
def plan_catchup(policy, options, remaining, alone, floor=1.0):
    if alone.model and options.catchup and options.catchup > 2:
        cost = policy.costs.catchup_cost(options.catchup) or 0.0
        mv = policy.model_value
        def charged(*a, **k):
            return mv(*a, **k) - max(policy.rate, floor) * cost
        policy.model_value = charged
        try:
            return orig_plan(policy, options, remaining, alone, floor)
        finally:
            del policy.model_value
    return orig_plan(policy, options, remaining, alone, floor)
def learn_noprefill(self, round):
    if round.num_verified > round.num_drafted + 1 and round.num_copied:
        self.calibration.learn(*A._model_tokens(round))
        if round.plan.copy_choice is not None:
            self.lookup.prober.learn(round.plan.copy_choice)
        return
    return orig_learn(self, round)
def use(name):
    S.plan_with_copy = orig_plan; A.plan_with_copy = orig_plan
    A.AdaptivePolicy.learn_tokens = orig_learn
    if "B" in name:
        A.plan_with_copy = plan_catchup
    if "A" in name:
        A.AdaptivePolicy.learn_tokens = learn_noprefill
orig_start = S._start_cost
def _use2(name):
    S._start_cost = (lambda policy, catchup: 0.0) if name == "old" else orig_start
_use1 = use
def use(name):
    _use1(name); _use2(name)
def _q1_start(policy, options):
    return orig_start(policy, options) * policy.lookup.prefix_probs(options.agreement, 1)[0]
_use3 = use
def use(name):
    _use3(name)
    if name == "q1":
        S._start_cost = _q1_start
from dynaspec.policies import calibration as C
_orig_cal_learn = C.Calibration.learn
def _cal_learn(self, num_drafted, num_accepted, confidences):
    _orig_cal_learn(self, num_drafted, num_accepted, confidences)
    known = min(num_drafted, num_accepted + 1)
    later = max(known - 1, 0)
    self.later_total = getattr(self, "later_total", 0.0) + later
    self.later_accepted = getattr(self, "later_accepted", 0.0) + max(min(num_accepted, known) - 1, 0)
def _continuation(self):
    w = self.prior_weight
    return (getattr(self, "later_accepted", 0.0) + self.first_prior * w) / (getattr(self, "later_total", 0.0) + w)
_orig_mv = A.AdaptivePolicy.model_value
def _mv_cont(self, prefix=1.0, offset=0, rows=1.0, floor=1.0, width=1, rate=None):
    first = self.calibration.first_token_acceptance()
    cont = self.calibration.continuation()
    cost = self.costs.draft_cost()
    rho = max(self.rate if rate is None else rate, floor)
    verify = self.costs.verify_cost
    best = total = 0.0
    for index in range(offset, self.config.max_tokens):
        prefix *= first if index == offset else cont
        step = verify(1 + width * (index + 1)) - verify(1 + width * index)
        total += rows * prefix - rho * (cost + step)
        best = max(best, total)
    return best
_use4 = use
def use(name):
    _use4(name)
    A.AdaptivePolicy.model_value = _orig_mv
    if name == "q1":
        S._start_cost = _q1_start
def _mv_first(self, prefix=1.0, offset=0, rows=1.0, floor=1.0, width=1, rate=None):
    first = self.calibration.first_token_acceptance()
    cost = self.costs.draft_cost()
    rho = max(self.rate if rate is None else rate, floor)
    verify = self.costs.verify_cost
    best = total = 0.0
    for index in range(offset, self.config.max_tokens):
        prefix *= first
        step = verify(1 + width * (index + 1)) - verify(1 + width * index)
        total += rows * prefix - rho * (cost + step)
        best = max(best, total)
    return best
_use5 = use
def use(name):
    _use5(name)
    if name == "first":
        A.AdaptivePolicy.model_value = _mv_first
import dataclasses as _dc
from dynaspec.policies import lookup_acceptance as L
_orig_la_init = L.LookupAcceptance.__init__
_LONG = [None]
def _la_init(self, prior=None):
    _orig_la_init(self, prior)
    if _LONG[0] is not None:
        acc = tuple(a if i < 3 else _LONG[0] for i, a in enumerate(self.prior.acceptance))
        self.prior = _dc.replace(self.prior, acceptance=acc)
L.LookupAcceptance.__init__ = _la_init
_use6 = use
def use(name):
    _use6(name)
    _LONG[0] = 0.97 if name.startswith("p97") else None
    if name == "p97first":
        A.AdaptivePolicy.model_value = _mv_first
_use7 = use
def use(name):
    _use7(name)
    if name == "old90":
        _LONG[0] = 0.9
        A.AdaptivePolicy.model_value = _mv_first
# "pool": a copy's tokens after its first also get a pooled rate (every copied token after a
# round's first, like a_c), used where it is above the bucket's
_orig_pp = L.LookupAcceptance.prefix_probs
_orig_ll = L.LookupAcceptance.learn
_POOL = [False]
def _pp(self, agreement, count):
    if not _POOL[0]:
        return _orig_pp(self, agreement, count)
    rates, prefix, probs = self.rates(), 1.0, []
    w = self.prior.weight
    pooled = (getattr(self, "pl_acc", 0.0) + 0.9 * w) / (getattr(self, "pl_tot", 0.0) + w)
    for position in range(count):
        r = rates[L.agreement_bucket(agreement + position)]
        prefix *= max(r, pooled) if position else r
        probs.append(prefix)
    return probs
def _ll(self, agreement, num_copied, num_accepted):
    _orig_ll(self, agreement, num_copied, num_accepted)
    known = min(num_copied, num_accepted + 1)
    self.pl_tot = getattr(self, "pl_tot", 0.0) + max(known - 1, 0)
    self.pl_acc = getattr(self, "pl_acc", 0.0) + max(min(num_accepted, known) - 1, 0)
L.LookupAcceptance.prefix_probs = _pp
L.LookupAcceptance.learn = _ll
_use8 = use
def use(name):
    _use8(name)
    _POOL[0] = name == "pool"
