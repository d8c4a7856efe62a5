"""Cost-aware adaptive lookahead: draft one more token only while it is expected to pay.

With P_k the probability that the first k drafted tokens are all accepted, a_(k+1) the next
one's acceptance, c the draft's cost per target token it proposes and V(n) the cost of
verifying n tokens (in target steps), and rho >= 1 the rate achieved so far (tokens per
target step), token k + 1 is drafted while

    P_k * a_(k+1)  >  rho * (c + V(k + 2) - V(k + 1))

and a lagging draft is fed its catch-up (C target steps) only when the tokens left repay it,

    R * s * (1 - 1 / rho_s)  >=  start_margin * C,

s the share of the tokens so far that no accepted copied token gave (1 without prompt
lookup): the tokens a draft would have to give.

The derivation (renewal-reward), the priors and the assumptions: docs/design/adaptive.md. The
policy combines named parts: a cost model (costs.py), a calibration (calibration.py), the
running rate, probers (prober.py), and with prompt lookup the copied tokens' acceptance
(lookup_acceptance.py) and the choice of sources (source_plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dynaspec.core.round import (
    Choice,
    CopySource,
    DraftOptions,
    DraftPlan,
    DraftStep,
    Round,
    StopReason,
)
from dynaspec.policies.calibration import Calibration
from dynaspec.policies.costs import CostModel
from dynaspec.policies.lookup_acceptance import LookupAcceptance, LookupPrior
from dynaspec.policies.prober import Prober
from dynaspec.policies.source_plan import plan_with_copy


@dataclass(frozen=True)
class AdaptiveConfig:
    """Priors and knobs of AdaptivePolicy; the defaults suit any hardware."""

    max_tokens: int = 20  # upper bound on tokens drafted per round (num_assistant_tokens)
    prior_draft_cost: float = 0.25  # draft time per token / target step, until measured
    prior_verify_slope: float = 0.05  # extra target-step cost per verified token, until measured
    prior_first_acceptance: float = 0.8  # a_1 until measured (optimistic: a fresh policy tries)
    calibration_bins: int = 10  # confidence bins on [0, 1]
    prior_weight: float = 2.0  # pseudo-observations per bin behind the calibrated prior
    window: int = 32  # rounds kept for the median cost estimates
    rate_decay: float = 0.9  # weight of the past in the running rate (tokens per step)
    probe_interval: int = 8  # rounds without drafting before a probe round drafts anyway
    max_probe_interval: int = 128  # probes back off (doubling) up to this interval
    max_probe_catchup: float = 1.0  # no probe when feeding the lagging draft costs more
    #                                 than this many target steps ...
    probe_budget: float = 0.02  # ... and more than this share of the tokens left (in steps)
    start_margin: float = 2.0  # feed a lagging draft (start it) only when the expected
    #                            savings over the tokens left are this many times the cost
    min_prefill_tokens: int = 16  # a target forward over at least this many unseen tokens
    #                              times the target's prefill (per token)
    lookup: LookupPrior = LookupPrior()  # copied tokens' acceptance per agreement, until learnt
    suffix: LookupPrior = LookupPrior()  # the suffix cache's copies' acceptance per
    #                                      agreement, until learnt (times each token's
    #                                      frequency: policies/source_plan.py)
    check_below: int = 4  # a running draft model checks a copy whose match agrees on fewer
    #                      tokens than this, instead of it being copied (0: never;
    #                      policies/source_plan.py)
    verify_buckets: tuple[int, ...] = ()  # widths the target pads its forwards to (CUDA
    #                      graphs: backends/graphs.py), each costed on its own; (): none


class AdaptivePolicy:
    """Drafts while the expected gain of one more token beats its cost (module docstring)."""

    name = "adaptive"

    def __init__(self, max_tokens: int = 20, config: AdaptiveConfig | None = None) -> None:
        self.config = config or AdaptiveConfig(max_tokens=max_tokens)
        self.reset()

    # ---- protocol ---------------------------------------------------------------------
    def reset(self) -> None:
        cfg = self.config
        self.costs = self.new_costs()
        self.calibration = Calibration(
            cfg.calibration_bins, cfg.prior_weight, cfg.prior_first_acceptance
        )
        self.rate = 1.0  # running tokens per target step (>= 1 when it is used)
        self.prober = Prober(cfg.probe_interval, cfg.max_probe_interval)  # the draft model's
        self.lookup = LookupAcceptance(cfg.lookup)  # copied tokens' acceptance, its prober
        self.suffix = LookupAcceptance(cfg.suffix)  # the same for the suffix cache's copies

    def acceptance(self, source: CopySource) -> LookupAcceptance:
        """The learned acceptance (and prober) of the copies from `source`."""
        return self.suffix if source is CopySource.SUFFIX else self.lookup

    def new_costs(self) -> CostModel:
        """A cost model holding the priors only."""
        cfg = self.config
        costs = CostModel(
            cfg.prior_draft_cost, cfg.prior_verify_slope, cfg.window, cfg.min_prefill_tokens
        )
        costs.use_buckets(cfg.verify_buckets)
        return costs

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        """The model's own rule; with a copy on offer (a lookup match, the suffix cache's),
        the choice of sources (source_plan)."""
        alone = self.model_plan(options.catchup, remaining) if options.catchup else DraftPlan()
        if not options.offers_copy:
            return alone
        return plan_with_copy(self, options, remaining, alone)

    def stopper(self, plan: DraftPlan) -> CostStopper:
        return CostStopper(self, plan.copy_accepted if plan.copy else 1.0)

    def update(self, round: Round) -> None:
        self.learn_tokens(round)
        self.costs.learn_yield(round)
        self.learn_forwards(round, round.num_accepted + 1)

    def learn_tokens(self, round: Round) -> None:
        """What the round's drafted tokens teach: the copied tokens' acceptance and the copy
        prober, the draft model's calibration."""
        copies = self.acceptance(round.plan.source)
        if round.plan.copy_choice is not None:
            copies.prober.learn(round.plan.copy_choice)
        if round.num_copied:
            copies.learn(round.agreement, round.num_copied, round.num_accepted)
        copied = min(round.num_copied, round.num_accepted, round.num_emitted)
        self.lookup.learn_share(round.num_emitted, copied)
        self.calibration.learn(*_model_tokens(round))

    def learn_forwards(self, round: Round, tokens: int) -> None:
        """What the round's forwards teach (their costs; the rate, from the `tokens` they
        yielded) and whether the draft model ran (its prober)."""
        self.costs.learn(round)
        self._learn_rate(round, tokens)
        if not round.num_model:  # the draft model proposed nothing
            self.prober.learn(Choice.DECLINED)
        else:
            self.prober.learn(Choice.PROBED if round.plan.probe else Choice.CHOSEN)

    def expect_draft_cost(self, ratio: float) -> None:
        """c until a draft forward is timed: `ratio`, the draft's weight bytes over the
        target's (a decoding forward reads every weight once), instead of the prior."""
        self.config = replace(self.config, prior_draft_cost=ratio)
        self.costs.prior_draft_cost = ratio

    def expect_buckets(self, buckets: tuple[int, ...]) -> None:
        """The target pads a verification to the next of `buckets` (its cost is the
        bucket's): the cost model learns and prices each bucket on its own."""
        self.config = replace(self.config, verify_buckets=tuple(buckets))
        self.costs.use_buckets(self.config.verify_buckets)

    # ---- the decision -------------------------------------------------------------------
    def model_plan(self, catchup: int = 1, remaining: int | None = None) -> DraftPlan:
        """All of max_tokens when drafting is expected to pay (`model_value`) and a lagging
        draft is worth feeding (the stopper then ends the draft), else nothing, except for a rare
        cheap probe of one token. `remaining` = tokens the call may still emit (None:
        unbounded)."""
        if self.model_value() > 0.0:
            worth = self.worth_starting(catchup, remaining)
            return DraftPlan(model=self.config.max_tokens if worth else 0)
        if self.prober.due() and self.cheap_probe(catchup, remaining):
            return DraftPlan(model=1, probe=True)  # keeps the estimates fresh
        return DraftPlan()

    def cheap_probe(self, catchup: int, remaining: int | None) -> bool:
        """Whether a probe's catch-up is cheap: at most max_probe_catchup target steps or
        probe_budget of the steps the tokens left take at least (one each)."""
        cost = self.costs.catchup_cost(catchup)
        if cost is None:
            return False
        budget = 0.0 if remaining is None else self.config.probe_budget * remaining
        return cost <= max(self.config.max_probe_catchup, budget)

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        """The most tokens the draft model alone would draft this round (0: none)."""
        return self.model_plan(catchup, remaining).model

    def threshold(self, num_drafted: int, floor: float = 1.0, rate: float | None = None) -> float:
        """rho * marginal cost (target steps) of drafting token num_drafted + 1; rho is
        never taken below `floor`, what the target alone yields per step (1 token; a batch's
        rows: one each); `rate`: the rate to weigh costs at instead of the running one (a
        batch's weighted rate)."""
        marginal = self.costs.draft_cost() + self.costs.verify_cost(num_drafted + 2)
        marginal -= self.costs.verify_cost(num_drafted + 1)
        return max(self.rate if rate is None else rate, floor) * marginal

    def model_value(
        self,
        prefix: float = 1.0,
        offset: int = 0,
        rows: float = 1.0,
        floor: float = 1.0,
        width: int = 1,
        rate: float | None = None,
    ) -> float:
        """G: the most the model's tokens after `offset` drafted ones (all accepted with
        probability `prefix`) are expected to gain over their cost, in tokens, before any
        confidence is seen (the first accepted with the first-token acceptance, each after it
        with the continuation's: `Calibration.continuation_acceptance`), for `rows`
        rows drafting together (in a batch, their summed worth: `DraftPlan.worth`) at rate
        max(rho, floor); each drafted position adds `width`
        tokens to the target's forward (1: a block as wide as the widest row; `rows`: rows
        packed, V counting every row's drafted tokens); `rate` as in `threshold`. Summed
        over the whole lookahead, not token by token: where verifying a second token costs
        far more than the next ones (V has a step at n = 2), the first drafted token alone
        never pays but a longer draft may."""
        first = self.calibration.first_token_acceptance()
        later = self.calibration.continuation_acceptance()
        cost = self.costs.draft_cost()
        rho = max(self.rate if rate is None else rate, floor)
        verify = self.costs.verify_cost
        best = total = 0.0
        for index in range(offset, self.config.max_tokens):
            prefix *= first if index == offset else later
            step = verify(1 + width * (index + 1)) - verify(1 + width * index)
            total += rows * prefix - rho * (cost + step)
            best = max(best, total)
        return best

    def verify_step(self, num_drafted: int) -> float:
        """V(k + 1) - V(k): what verifying drafted token k costs on top (target steps)."""
        return self.costs.verify_cost(num_drafted + 1) - self.costs.verify_cost(num_drafted)

    def worth_starting(self, catchup: int, remaining: float | None, width: int = 1) -> bool:
        """Whether the draft's catch-up (paid now) is repaid by the tokens left: expected
        savings >= start_margin * catch-up cost, the savings counted on the share of the
        tokens left that copies are not expected to give (`LookupAcceptance.uncopied_share`:
        where copies give most tokens, a draft has few left to speed up). A draft in step (at
        most one token beyond the usual one to feed) always is. `width`: tokens each drafted
        position adds to the target's forward (`model_value`'s)."""
        if catchup <= 2:
            return True
        cost = self.costs.catchup_cost(catchup)
        if cost is None:  # not measurable yet: a plain target step measures it
            return False
        if remaining is None:
            return True
        left = remaining * self.lookup.uncopied_share()
        savings = left * (1.0 - 1.0 / self.expected_rate(width))
        return savings >= self.config.start_margin * cost

    def expected_rate(self, width: int = 1) -> float:
        """Tokens per target step expected from drafting, before any confidence is seen:
        max over k of (1 + a + ... + a^k) / (k c + V(1 + width k)), a = first-token
        acceptance; `width` as in `model_value` (rows packed: every row drafts k)."""
        accept = self.calibration.first_token_acceptance()
        cost = self.costs.draft_cost()
        best, tokens, prefix = 1.0, 1.0, 1.0
        for k in range(1, self.config.max_tokens + 1):
            prefix *= accept
            tokens += prefix
            best = max(best, tokens / (k * cost + self.costs.verify_cost(1 + width * k)))
        return best

    # ---- learning -----------------------------------------------------------------------
    def round_steps(self, round: Round) -> float | None:
        """The round's time in target steps, where the rate learns from it: None for a round
        with a catch-up (its time is not a decoding round's) or no time."""
        if round.num_verified != round.num_drafted + 1:
            return None
        steps = (round.draft_time_s + round.target_time_s) / self.costs.step_time()
        return steps if steps > 0 else None

    def _learn_rate(self, round: Round, tokens: int) -> None:
        steps = self.round_steps(round)
        if steps is None:
            return
        decay = self.config.rate_decay
        self.rate = decay * self.rate + (1 - decay) * (tokens / steps)


class CostStopper:
    """The adaptive rule within one round: P_k starts at the copied tokens' Q_m (1 without
    a copy) and falls with each drafted token's calibrated acceptance."""

    reason = StopReason.COST
    needs_confidence = True  # predicts the next acceptance from the token just drafted

    def __init__(self, policy: AdaptivePolicy, prefix: float) -> None:
        self.policy = policy
        self.prefix = prefix  # P_k of this round

    def should_stop(self, step: DraftStep) -> bool:
        accept = self.policy.calibration.acceptance(step.confidence)
        self.prefix *= accept
        # The gain of token index + 2, predicted from the confidence of the token just drafted.
        return self.prefix * accept <= self.policy.threshold(step.index + 1)


def _model_tokens(round: Round) -> tuple[int, int, tuple[float, ...]]:
    """(drafted, accepted, confidences) of the draft model's tokens in `round`: none when a
    copied token was rejected (the model's were never judged)."""
    copied = round.num_copied
    if round.num_accepted < copied:
        return 0, 0, ()
    return round.num_model, round.num_accepted - copied, round.confidences[copied:]
