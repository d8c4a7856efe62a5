"""Named variants of the copy rule, patched in for the replay runs (`use(name)`).

- code: dynaspec as committed (policies/source_plan.py, policies/lookup_acceptance.py).
- flat: every copied token priced at the match's own agreement bucket (the agreement does not
  grow along the copy).
- half: the agreement grows at half the copy's position.
- w1, w4: the copied tokens' prior behind 1 or 4 pseudo-observations a bucket (committed: 2).
- lo, hi: lower or higher prior acceptance per bucket.
- nb: the long buckets' prior not raised to the draft's continuation rate.
- rho1.5, rho2: costs weighed at a rate of at least 1.5 or 2 tokens a step (committed: 1).
- gfirst: with the draft running and a copy on offer, copy nothing: the whole continuation is
  the draft's guess (its one forward keeps what it agrees with), the draft drafts on.
- gfirst-rej: the same only where the rule chose no copy.
- nocheck: no copy checked by the draft (`AdaptiveConfig.check_below` = 0; "code" before
  that rule was committed).
- gcheckN (run at b4ee658, before the rule was committed): with the draft running, a copy
  the rule chose at an agreement below N becomes the draft's guess whole: the draft's one
  forward over it keeps the copied tokens it agrees with (no stopping among them) and
  drafts on, with the cost rule, from where it parts from them.
- checkq: the committed check, the stopper after the checked copy starting from the rule's
  Q_m (as after a sent copy) instead of 1.
- start: the draft's start (its prefill of the prompt) charged nothing, so it starts as soon
  as drafting is worth anything and checks apply on prompts that copy well too.
- learnchk: a checked copy teaches the copy's acceptance what the round tells of it (without
  it a copy the draft checks teaches nothing, as it is never sent).
- share (run at 543a530, before the rule was committed): a draft's start is repaid only by
  the tokens copies will not give: the tokens left weighed by the share of the call's tokens
  so far that no accepted copied token gave (behind 4 such tokens, not decayed).
- noshare: the committed rule without that share (`LookupAcceptance.uncopied_share` 1.0):
  "code" before the share was committed.
"""

from dataclasses import replace

from dynaspec.core.round import DraftPlan
from dynaspec.policies import adaptive, lookup_acceptance, source_plan

_active = {"name": "code"}
PRIORS = {
    "w1": {"weight": 1.0},
    "w4": {"weight": 4.0},
    "lo": {"acceptance": (0.2, 0.4, 0.65, 0.85, 0.9, 0.9, 0.9)},
    "hi": {"acceptance": (0.3, 0.55, 0.8, 0.95, 0.95, 0.95, 0.95)},
    "nb": {"borrow_from": 64},
}
STEP = {"flat": lambda position: 0, "half": lambda position: position // 2}
_prefix_probs = lookup_acceptance.LookupAcceptance.prefix_probs
_init = lookup_acceptance.LookupAcceptance.__init__
_plan_with_copy = source_plan.plan_with_copy


def prefix_probs(self, agreement, count, borrowed=0.0):
    grow = STEP.get(_active["name"])
    if grow is None:
        return _prefix_probs(self, agreement, count, borrowed)
    rates, prefix, probs = self.rates(borrowed), 1.0, []
    for position in range(count):
        prefix *= rates[lookup_acceptance.agreement_bucket(agreement + grow(position))]
        probs.append(prefix)
    return probs


def init(self, prior=None):
    prior = prior or lookup_acceptance.LookupPrior()
    _init(self, replace(prior, **PRIORS.get(_active["name"], {})))


def plan_with_copy(policy, options, remaining, alone, floor=1.0):
    name = _active["name"]
    if name.startswith("rho"):
        floor = max(floor, float(name[3:]))
    plan = _plan_with_copy(policy, options, remaining, alone, floor)
    running = options.catchup is not None and options.started
    most = policy.config.max_tokens
    if running and (name == "gfirst" or (name == "gfirst-rej" and not plan.copy)):
        guess = min(options.num_copy, most - 1)
        return DraftPlan(model=most, guess=guess, copy_choice=plan.copy_choice)
    if running and name.startswith("gcheck") and plan.copy and options.agreement < int(name[6:]):
        _checked["copy"] = options.copy[: plan.copy].tolist()
        return DraftPlan(model=plan.copy + most, guess=plan.copy, copy_choice=plan.copy_choice)
    _checked["copy"] = None
    return plan


_checks = source_plan._checks


def checks(policy, options):
    return _active["name"] != "nocheck" and _checks(policy, options)


source_plan._checks = checks
_checked = {"copy": None}  # the copy the draft checks this round (gcheckN)
_stopper = adaptive.AdaptivePolicy.stopper


class CheckStopper:
    """No stop while the draft agrees with the checked copy; the cost rule after it."""

    def __init__(self, inner, copy):
        self.inner, self.copy, self.agreeing = inner, copy, True
        self.reason, self.needs_confidence = inner.reason, inner.needs_confidence

    def should_stop(self, step):
        if self.agreeing and step.index < len(self.copy) and step.token == self.copy[step.index]:
            return False
        self.agreeing = False
        return self.inner.should_stop(step)


_plan = adaptive.AdaptivePolicy.plan


def plan(self, options, remaining):
    _checked["copy"] = None
    return _plan(self, options, remaining)


def stopper(self, plan):
    inner = _stopper(self, plan)
    return inner if _checked["copy"] is None else CheckStopper(inner, _checked["copy"])


lookup_acceptance.LookupAcceptance.prefix_probs = prefix_probs
lookup_acceptance.LookupAcceptance.__init__ = init
adaptive.plan_with_copy = plan_with_copy
adaptive.AdaptivePolicy.stopper = stopper
adaptive.AdaptivePolicy.plan = plan


def use(name: str) -> None:
    _active["name"] = name


# checkq: a checked copy's stopper starts from the rule's Q_m (as after a sent copy), not 1
_plan_with_copy_committed = adaptive.plan_with_copy
_stopper_committed = adaptive.AdaptivePolicy.stopper


def plan_with_copy_q(policy, options, remaining, alone, floor=1.0):
    plan = _plan_with_copy_committed(policy, options, remaining, alone, floor)
    if _active["name"] == "checkq" and plan.checked:
        has_model = options.catchup is not None
        borrowed = policy.calibration.continuation_acceptance() if has_model else 0.0
        probs = policy.lookup.prefix_probs(options.agreement, options.num_copy, borrowed)
        return replace(plan, copy_accepted=probs[plan.checked - 1])
    return plan


def stopper_q(self, plan):
    if _active["name"] == "checkq" and plan.checked:
        return adaptive.CostStopper(self, plan.copy_accepted)
    return _stopper_committed(self, plan)


adaptive.plan_with_copy = plan_with_copy_q
adaptive.AdaptivePolicy.stopper = stopper_q


# start: the draft's start (its prompt's prefill) charged nothing: a draft starts as soon as
# it is worth anything, so checks apply on prompts that copy well too
_start_cost = source_plan._start_cost
_worth_starting = adaptive.AdaptivePolicy.worth_starting


def start_cost(policy, options):
    return 0.0 if _active["name"] == "start" else _start_cost(policy, options)


def worth_starting(self, catchup, remaining, width=1):
    return _active["name"] == "start" or _worth_starting(self, catchup, remaining, width)


source_plan._start_cost = start_cost
adaptive.AdaptivePolicy.worth_starting = worth_starting


# learnchk: a checked copy teaches the copy's acceptance what the round tells of it: the
# draft drafted the copy's first `held` tokens (its guessed rows), so the copy was kept as far
# as the target kept them, and where the target kept the draft's own token after them the
# copy's was wrong; where the target parted exactly there, only the held ones are known
_update = adaptive.AdaptivePolicy.update


def update(self, round):
    m = round.plan.checked
    if _active["name"] == "learnchk" and m and not round.num_copied:
        held = min(round.guess_hits, m)
        accepted, drafted = round.num_accepted, round.num_drafted
        if accepted < held:
            self.lookup.learn(round_agreement[0], accepted + 1, accepted)
        elif held < m and drafted > held and accepted > held:
            self.lookup.learn(round_agreement[0], held + 1, held)
        elif held:
            self.lookup.learn(round_agreement[0], held, held)
    return _update(self, round)


round_agreement = [0]
_plan_committed = adaptive.AdaptivePolicy.plan


def plan_agreement(self, options, remaining):
    round_agreement[0] = options.agreement
    return _plan_committed(self, options, remaining)


adaptive.AdaptivePolicy.update = update
adaptive.AdaptivePolicy.plan = plan_agreement


# share: a draft's start (or a lagging draft's catch-up) is repaid only by the tokens the
# copies will not yield: the tokens left are weighed by the share of this call's tokens so far
# that no accepted copied token gave (behind 4 such tokens)
_update_share = adaptive.AdaptivePolicy.update
_worth_share = adaptive.AdaptivePolicy.worth_starting


def update_share(self, round):
    counts = self.__dict__.setdefault("_share", [0, 0])
    counts[0] += round.num_emitted
    counts[1] += round.num_emitted - min(round.num_accepted, round.num_copied)
    return _update_share(self, round)


def worth_share(self, catchup, remaining, width=1):
    if _active["name"] == "share" and remaining is not None:
        emitted, uncopied = self.__dict__.get("_share", [0, 0])
        remaining = remaining * (uncopied + 4) / (emitted + 4)
    return _worth_share(self, catchup, remaining, width)


adaptive.AdaptivePolicy.update = update_share
adaptive.AdaptivePolicy.worth_starting = worth_share


# noshare: the committed start rule without the copies' share
_uncopied_share = lookup_acceptance.LookupAcceptance.uncopied_share


def uncopied_share(self):
    return 1.0 if _active["name"] == "noshare" else _uncopied_share(self)


lookup_acceptance.LookupAcceptance.uncopied_share = uncopied_share
