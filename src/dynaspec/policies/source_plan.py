"""Prompt lookup in the cost-aware rule: which source drafts a round, and how far.

With Q_j the probability that the first j copied tokens are all accepted (learned by
agreement, lookup_acceptance.py), copied token j pays exactly when

    Q_j  >  rho * (V(j + 1) - V(j))

(the model's rule with c = 0), so the copy ends at the first j where this fails (summed
over the copy: where verifying a second token costs far more than the next, a longer copy
may pay as a whole when its first token alone does not). The draft model carries on after
m copied tokens when its expected gain G(m) beats the catch-up its rejected copied tokens
waste, and the plan "the model alone" wins when it is worth more than the copy; a draft
that has not run yet is charged its start there (its prefill: a copy lets it wait, and on
text that copies well it may never be needed). Where the model drafts, the continuation's
next tokens are fed to it as a guess of its own (`_guess_length`). Where a running draft
of the target's vocabulary can, it checks a copy of a short agreement instead of the copy
being sent (`_checks`). The derivation and its assumptions: docs/design/adaptive.md ("Prompt
lookup").
"""

from __future__ import annotations

from typing import Protocol

from dynaspec.core.round import Choice, CopySource, DraftOptions, DraftPlan
from dynaspec.policies.calibration import Calibration
from dynaspec.policies.costs import CostModel
from dynaspec.policies.lookup_acceptance import LookupAcceptance, agreement_bucket


class PlanLimits(Protocol):
    """The adaptive policy's bounds that the choice of sources reads (AdaptiveConfig)."""

    max_tokens: int  # the most tokens the model drafts in one round
    check_below: int  # a running draft checks a copy whose match agrees on fewer tokens


class CopyPlanner(Protocol):
    """What the choice of sources reads of the cost-aware rule (adaptive.py's AdaptivePolicy,
    which calls it: a protocol, so that neither module imports the other)."""

    config: PlanLimits
    rate: float  # running tokens per target step
    calibration: Calibration  # the draft model's acceptance by confidence
    costs: CostModel  # V(n), the draft's step and catch-up costs
    lookup: LookupAcceptance  # prompt lookup's copies' acceptance by agreement
    suffix: LookupAcceptance  # the suffix cache's copies' acceptance by agreement

    def acceptance(self, source: CopySource) -> LookupAcceptance: ...

    def model_value(
        self,
        prefix: float = 1.0,
        offset: int = 0,
        rows: float = 1.0,
        floor: float = 1.0,
        width: int = 1,
        rate: float | None = None,
    ) -> float: ...

    def verify_step(self, num_drafted: int) -> float: ...

    def worth_starting(self, catchup: int, remaining: float | None, width: int = 1) -> bool: ...


def plan_with_copy(
    policy: CopyPlanner,
    options: DraftOptions,
    remaining: int | None,
    alone: DraftPlan,
    floor: float = 1.0,
) -> DraftPlan:
    """The sources of a round with a copy on offer (prompt lookup's match, the suffix
    cache's continuation, or both: the one whose copy is worth more); `alone` is the draft
    model's own plan (nothing without a draft model). rho is never taken below `floor`: what
    the target alone yields per step (1; in a batch, 1 per row going, as the batch's rate
    counts every row's tokens)."""
    rho = max(policy.rate, floor)
    source, probs, copied = _best_source(policy, options, rho)
    offer = options.chosen(source)
    learner = policy.acceptance(source)
    copied, choice = learner.choose(copied)  # 1 now and then when it keeps declining
    if not copied:
        return _alone(policy, alone, probs, choice, source)
    expected = sum(probs[:copied])
    value = expected - rho * (policy.costs.verify_cost(copied + 1) - 1.0)
    start = rho * _start_cost(policy, offer)
    carry = _carry_on_value(
        policy, probs[copied - 1], copied, offer.catchup, expected, remaining, rho
    )
    if alone.model and policy.model_value(floor=rho) - start > value + max(carry, 0.0):
        # the model alone is worth more than the copy
        return _alone(policy, alone, probs, choice, source)
    if _checks(policy, offer):
        lookahead = copied + policy.config.max_tokens
        return DraftPlan(
            model=lookahead, copy_choice=choice, guess=copied, checked=copied, source=source
        )
    model = max(policy.config.max_tokens - copied, 0) if carry > 0.0 else 0  # 0: stands aside
    guess = _guess_length(policy, probs, copied, model)
    return DraftPlan(
        copied,
        model,
        copy_choice=choice,
        copy_accepted=probs[copied - 1],
        guess=guess,
        source=source,
    )


def _best_source(
    policy: CopyPlanner, options: DraftOptions, rho: float
) -> tuple[CopySource, list[float], int]:
    """The copy source whose best copy is worth more (Q_1 + ... + Q_m - rho (V(m + 1) - 1)
    at its own best m; prompt lookup on a tie), its Q_1 .. Q_L and that m (each source's m
    found once: this runs per row and round). A suffix cache's token j is accepted with
    b(ell + j), learned by agreement for its copies apart from prompt lookup's, times how
    often it followed the tokens before it (`suffix_frequencies`)."""
    # a long match's untried buckets trust the copy as much as a running draft (a_c)
    has_model = options.catchup is not None
    borrowed = policy.calibration.continuation_acceptance() if has_model else 0.0
    candidates: list[tuple[CopySource, list[float]]] = []
    if options.num_copy:
        probs = policy.lookup.prefix_probs(options.agreement, options.num_copy, borrowed)
        candidates.append((CopySource.LOOKUP, probs))
    if options.num_suffix:
        rates = policy.suffix.rates(borrowed)
        probs, prefix = [], 1.0
        for position, frequency in enumerate(options.suffix_frequencies):
            prefix *= rates[agreement_bucket(options.suffix_agreement + position)] * frequency
            probs.append(prefix)
        candidates.append((CopySource.SUFFIX, probs))
    scored = [(source, probs, _copy_length(probs, rho, policy)) for source, probs in candidates]
    if len(scored) == 1:  # nothing to weigh it against
        return scored[0]
    return max(scored, key=lambda best: _copy_value(best[1], best[2], rho, policy))


def _copy_value(probs: list[float], copied: int, rho: float, policy: CopyPlanner) -> float:
    """Q_1 + ... + Q_m - rho (V(m + 1) - 1) at m = `copied` (`_copy_length`'s); 0 for none."""
    return sum(probs[:copied]) - rho * (policy.costs.verify_cost(copied + 1) - 1.0)


def _checks(policy: CopyPlanner, options: DraftOptions) -> bool:
    """Whether the draft model checks the copy the rule chose instead of it being copied: a
    draft that takes a guess and has run (no catch-up of the prompt to pay), and a match that
    agrees on fewer than `check_below` tokens. The copy is its guess: it drafts through the
    copied tokens it agrees with without stopping and on after them by its own rule, and a
    copied token it would not draft is never verified. Where the target paraphrases what it
    quotes, a short match's first token is wrong about as often as right, and the draft's
    token there is the better guess (docs/design/adaptive.md, "A copy the draft checks")."""
    return options.checks and options.started and options.agreement < policy.config.check_below


def _alone(
    policy: CopyPlanner,
    alone: DraftPlan,
    probs: list[float],
    choice: Choice,
    source: CopySource = CopySource.LOOKUP,
) -> DraftPlan:
    """The draft model's own plan, the continuation on offer (from `source`) its guess."""
    guess = _guess_length(policy, probs, 0, alone.model)
    return DraftPlan(
        model=alone.model, probe=alone.probe, copy_choice=choice, guess=guess, source=source
    )


def _guess_length(policy: CopyPlanner, probs: list[float], copied: int, model: int) -> int:
    """How many of the continuation's tokens after the `copied` ones to feed the draft
    model as a guess of its own next `model` tokens: while the chance that it drafts all of
    them so far (taken as the copy's, Q_j given the copied tokens accepted) is above what a
    token more in a forward costs against a forward of its own."""
    price = policy.costs.guess_price()
    given = probs[copied - 1] if copied else 1.0
    length = 0
    for prob in probs[copied : copied + model - 1]:
        if prob < price * given:
            break
        length += 1
    return length


def _start_cost(policy: CopyPlanner, options: DraftOptions) -> float:
    """What the plan "the model alone" pays to start a draft that has not run yet (target
    steps): its catch-up, the prompt's prefill. A copy lets the start wait a round for
    about as much (a copied token fed later costs what it costs now), and where the text
    copies well it may never be paid; a draft that has run lags only by what the rounds
    since left, fed at its next round whatever this one does (0 then)."""
    if options.started or options.catchup is None or options.catchup <= 2:
        return 0.0
    return policy.costs.catchup_cost(options.catchup) or 0.0


def _carry_on_value(
    policy: CopyPlanner,
    prefix: float,
    copied: int,
    catchup: int | None,
    expected: float,
    remaining: int | None,
    rho: float,
) -> float:
    """G(m) - rho * (wasted catch-up), or 0 when the model cannot carry on; rho: the rate
    the plan weighs costs at."""
    if catchup is None or not policy.worth_starting(catchup, remaining):
        return 0.0
    feed = policy.costs.catchup_cost(copied + 1)  # the m copied tokens, in target steps
    if feed is None:
        return 0.0
    wasted = feed * (copied - expected) / copied
    return policy.model_value(prefix, copied, floor=rho) - rho * wasted


def _copy_length(probs: list[float], rho: float, policy: CopyPlanner) -> int:
    """The j that maximises Q_1 + ... + Q_j - rho * (V(j + 1) - 1), 0 when none is above 0:
    the first j where Q_j stops paying, unless V's step at n = 2 hides a longer copy
    that pays as a whole."""
    best = total = 0.0
    copied = 0
    for index, prob in enumerate(probs):
        total += prob - rho * policy.verify_step(index + 1)
        if total > best:
            best, copied = total, index + 1
    return copied
