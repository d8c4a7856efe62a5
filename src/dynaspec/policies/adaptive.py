"""Cost-aware adaptive lookahead: draft one more token only while it is expected to pay.

The rule (derivation)
---------------------
Measure time in target steps: T1 = the target's time to verify one token (a plain decoding
step). Let c = the draft's time per token / T1 and V(n) = the target's time to verify n
tokens / T1 (V(1) = 1; on a CPU in bf16 V is nearly flat for small n). A round that drafts
k tokens costs t(k) = k * c + V(k + 1) and yields E(k) = 1 + sum_{i<=k} P_i tokens, where
P_i = a_1 * ... * a_i is the probability that the first i drafted tokens are all accepted
and a_j the acceptance probability of drafted token j.

Decoding is a renewal process: its long-run rate is (sum of tokens) / (sum of time). By the
renewal-reward argument (Dinkelbach), a round maximises the long-run rate rho* when it
maximises E(k) - rho* t(k). Adding token k + 1 therefore pays exactly when

    P_k * a_{k+1}  >  rho * (c + V(k + 2) - V(k + 1))

expected gain (tokens) > rate x marginal cost (target steps). rho is the rate already
achieved (tokens per target step), never taken below 1: decoding with the target alone
achieves 1, so a draft token must at least beat that. With rho = 1 this is the plain
"gain outweighs cost" rule; with a good draft rho > 1 and the rule is stricter, since
time spent on a doubtful token is taken from rounds that pay better.

Before a round (k = 0) the same test decides whether to draft at all: if even the first
token is not expected to pay (a_1 < rho * (c + V(2) - V(1))), the round is a plain target
step and the user is never slower than with the target alone (up to the policy's own,
negligible bookkeeping and a rare probe round that keeps the estimates fresh).

Starting the draft is an investment
-----------------------------------
A draft that is behind (the prompt in the first round, or tokens skipped while not drafting)
must first be fed the tokens it missed, a catch-up that costs like a prefill: C target
steps, paid once. It pays back only over the tokens still to come. Drafting pays rho_s
tokens per target step against 1 for the target alone, so over the R tokens the call may
still emit it saves about S = R * (1 - 1 / rho_s) steps. rho_s is estimated before any
drafting, with a geometric model: every drafted token accepted with the first-token
acceptance a_1, and the best lookahead k, rho_s = max_k (1 + a_1 + ... + a_1^k) / t(k).
The policy pays the catch-up only when S >= start_margin * C (default 2): C is nearly
certain once measured, S rests on priors until the first rounds, and a fresh policy spends a
few rounds learning. Until C can be estimated at all, rounds are plain target steps, which
cost exactly what the target alone costs: the first (the target's prefill) measures the
target's time per prompt token, the second the time of one step, and C is estimated as
c * (catch-up tokens) * (target prefill seconds per token) / (target step seconds), until an
actual catch-up has been timed. A short generation after a long prompt on hardware where a
draft token is dear therefore never runs the draft at all; on a GPU, where a prefill costs
about a step, the same rule starts drafting in the third round (by the rule; not measured).

While it does not draft, the draft falls behind again. Probes therefore back off (each waits
twice as long as the last until drafting pays on its own again) and are skipped when the
catch-up would cost more than `max_probe_catchup` target steps. A policy object reused
across calls that has learned drafting does not pay on this machine thus never even runs the
draft's prefill.

Estimates (all online, held in this object, robust to a noisy machine)
----------------------------------------------------------------------
- a_j: the draft's confidence (its probability of the token it proposed) mapped through a
  calibration learned from finished rounds: acceptance counts per confidence bin with a
  prior that the draft is calibrated, made monotone by pool-adjacent-violators. The next
  token's acceptance is predicted from the confidence of the token just drafted.
- c and V(n): medians over a window of recent rounds (a median ignores the occasional
  slow step); V(n) is a least-squares line through the per-n medians with a slope >= 0.
  While only single-token steps have been timed, the slope is the target's prefill time
  per prompt token: a prefill is a forward over many tokens, and its cost per token is
  what verifying more tokens costs (about 0.5 steps per token on a CPU without bf16
  kernels, nearly 0 on a GPU).
  Rounds whose forwards include a catch-up (the prompt, or tokens skipped while not
  drafting) are not used for the per-token costs; they give the catch-up costs instead.
- Priors until measured: c = 0.25, V(n) = 1 + 0.05 (n - 1) (before any prefill),
  calibration = identity, a_1 = 0.8 (optimistic, so that a fresh policy tries drafting
  where starting is cheap).

Assumptions: acceptances within a round are independent given the confidences; the cost of
a draft token does not depend on its position; bookkeeping time is small against a forward.

With prompt lookup (alone or with the draft model), the same rule also chooses, round by
round, how many tokens to copy and whether the model carries on after them: the extension
and its derivation are in source_plan.py (the `SourcePlanning` part of this class).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from dynaspec.core.protocols import DraftStep, RoundResult
from dynaspec.policies.lookup_acceptance import LookupAcceptance
from dynaspec.policies.source_plan import SourcePlanning


@dataclass(frozen=True)
class AdaptiveConfig:
    """Priors and knobs of AdaptivePolicy; the defaults suit any hardware."""

    max_tokens: int = 20  # upper bound on tokens drafted per round (num_assistant_tokens)
    prior_draft_cost: float = 0.25  # draft time per token / target step, until measured
    prior_verify_slope: float = 0.05  # extra target-step cost per verified token, until measured
    calibration_bins: int = 10  # confidence bins on [0, 1]
    prior_weight: float = 2.0  # pseudo-observations per bin behind the calibrated prior
    window: int = 32  # rounds kept for the median cost estimates
    rate_decay: float = 0.9  # weight of the past in the running rate (tokens per step)
    probe_interval: int = 8  # rounds without drafting before a probe round drafts anyway
    max_probe_interval: int = 128  # probes back off (doubling) up to this interval
    max_probe_catchup: float = 1.0  # no probe when feeding the lagging draft costs more
    #                                 than this many target steps
    start_margin: float = 2.0  # feed a lagging draft (start it) only when the expected
    #                            savings over the tokens left are this many times the cost
    min_prefill_tokens: int = 4  # a target forward over at least this many unseen tokens
    #                              times the target's prefill (per token)


class AdaptivePolicy(SourcePlanning):
    """Drafts while the expected gain of one more token beats its cost (module docstring)."""

    name = "adaptive"
    stop_reason = "cost"
    needs_confidence = True  # predicts the next acceptance from the token just drafted

    def __init__(self, max_tokens: int = 20, config: AdaptiveConfig | None = None) -> None:
        self.config = config or AdaptiveConfig(max_tokens=max_tokens)
        self.reset()

    # ---- protocol ---------------------------------------------------------------------
    def reset(self) -> None:
        cfg = self.config
        bins = cfg.calibration_bins
        self.bin_accepted = [0.0] * bins  # observed accepted tokens per confidence bin
        self.bin_total = [0.0] * bins  # observed tokens with a known outcome per bin
        self.draft_costs: deque[float] = deque(maxlen=cfg.window)  # seconds per draft token
        self.catchup_costs: deque[float] = deque(maxlen=cfg.window)  # s per catch-up token
        self.prefill_costs: deque[float] = deque(maxlen=cfg.window)  # target s per prompt token
        self.verify_times: dict[int, deque[float]] = {}  # n verified -> recent seconds
        self.rate = 1.0  # running tokens per target step (>= 1 when it is used)
        self.rounds_without_draft = 0
        self.probe_interval = cfg.probe_interval
        self.first_accepted = 0.0  # first drafted tokens accepted
        self.first_total = 0.0  # first drafted tokens with a known outcome
        self._calibration: list[float] | None = None  # cached fit, None when stale
        self._line: tuple[float, float] | None = None  # cached V(n) fit, None when stale
        self._prefix = 1.0  # P_k of the round in progress
        self._probing = False  # the round in progress is a probe
        self.lookup = LookupAcceptance()  # acceptance of copied tokens (source_plan.py)

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        """All of max_tokens when the first token is expected to pay and a lagging draft is
        worth feeding (the should_stop rule then ends the draft), else 0, except for a rare
        cheap probe of one token. `remaining` = tokens the call may still emit (None:
        unbounded)."""
        self._prefix = 1.0
        self._probing = False
        if self.first_token_acceptance() > self.threshold(0):
            return self.config.max_tokens if self.worth_starting(catchup, remaining) else 0
        if self.rounds_without_draft >= self.probe_interval:  # a probe is due ...
            cost = self.catchup_cost(catchup)
            if cost is not None and cost <= self.config.max_probe_catchup:  # ... and cheap
                self._probing = True  # keeps the estimates fresh; backs off in update()
                return 1
        return 0

    def should_stop(self, step: DraftStep) -> bool:
        accept = self.acceptance(step.confidence)
        self._prefix *= accept
        # Gain of drafting token index+2 predicted from the confidence of the token just drafted.
        return self._prefix * accept <= self.threshold(step.index + 1)

    def update(self, result: RoundResult) -> None:
        self._learn_calibration(self._learn_lookup(result))  # copied tokens apart
        self._learn_costs(result)
        self._learn_rate(result)
        if result.num_drafted == result.num_lookup:  # the draft model proposed nothing
            self.rounds_without_draft += 1
            return
        self.rounds_without_draft = 0
        if self._probing:  # each probe waits twice as long as the last ...
            self.probe_interval = min(self.probe_interval * 2, self.config.max_probe_interval)
        else:  # ... until drafting pays again on its own
            self.probe_interval = self.config.probe_interval

    # ---- the decision -------------------------------------------------------------------
    def threshold(self, num_drafted: int) -> float:
        """rho * marginal cost (target steps) of drafting token num_drafted + 1."""
        marginal = self.draft_cost() + self.verify_cost(num_drafted + 2)
        marginal -= self.verify_cost(num_drafted + 1)
        return max(self.rate, 1.0) * marginal

    def worth_starting(self, catchup: int, remaining: int | None) -> bool:
        """Whether the draft's catch-up (paid now) is repaid by the tokens left: expected
        savings >= start_margin * catch-up cost (module docstring). A draft in step (at most
        one token beyond the usual one to feed) always is."""
        if catchup <= 2:
            return True
        cost = self.catchup_cost(catchup)
        if cost is None:  # not measurable yet: a plain target step measures it
            return False
        if remaining is None:
            return True
        savings = remaining * (1.0 - 1.0 / self.expected_rate())
        return savings >= self.config.start_margin * cost

    def expected_rate(self) -> float:
        """Tokens per target step expected from drafting, before any confidence is seen:
        max over k of (1 + a + ... + a^k) / (k c + V(k + 1)), a = first-token acceptance."""
        accept, cost = self.first_token_acceptance(), self.draft_cost()
        best, tokens, prefix = 1.0, 1.0, 1.0
        for k in range(1, self.config.max_tokens + 1):
            prefix *= accept
            tokens += prefix
            best = max(best, tokens / (k * cost + self.verify_cost(k + 1)))
        return best

    def first_token_acceptance(self) -> float:
        """a_1 before the round: observed first-token acceptance behind an optimistic prior
        (so that a fresh policy tries drafting, and learns)."""
        prior, weight = 0.8, self.config.prior_weight
        return (self.first_accepted + prior * weight) / (self.first_total + weight)

    # ---- estimates ----------------------------------------------------------------------
    def acceptance(self, confidence: float) -> float:
        """Calibrated probability that a drafted token with this confidence is accepted."""
        if self._calibration is None:
            self._calibration = self._fit_calibration()
        bins = self.config.calibration_bins
        index = min(int(confidence * bins), bins - 1)
        return self._calibration[index]

    def catchup_cost(self, catchup: int) -> float | None:
        """Target steps to feed a lagging draft the catchup - 1 tokens beyond the usual one;
        None while that cannot be estimated (no target step timed, and neither a catch-up
        nor the target's prefill)."""
        if catchup <= 1:
            return 0.0
        if not self.verify_times:
            return None
        if self.catchup_costs:
            per_token = statistics.median(self.catchup_costs) / self._step_time()
        elif self.prefill_costs:  # the draft's prefill ~ c times the target's
            per_token = self.draft_cost() * statistics.median(self.prefill_costs)
            per_token /= self._step_time()
        else:
            return None
        return (catchup - 1) * per_token

    def draft_cost(self) -> float:
        """Draft time per token in target steps."""
        if not self.draft_costs or not self.verify_times:
            return self.config.prior_draft_cost
        return statistics.median(self.draft_costs) / self._step_time()

    def verify_cost(self, num_tokens: int) -> float:
        """Target time to verify num_tokens tokens, in target steps (V(1) = 1)."""
        intercept, slope = self._verify_line()
        return 1.0 + slope * (num_tokens - 1) / intercept

    # ---- learning -----------------------------------------------------------------------
    def _learn_calibration(self, result: RoundResult) -> None:
        bins = self.config.calibration_bins
        # Tokens up to and including the first rejection have a known outcome.
        known = min(result.num_drafted, result.num_accepted + 1)
        if known:
            self.first_total += 1
            self.first_accepted += result.num_accepted > 0
        for index in range(known):
            b = min(int(result.confidences[index] * bins), bins - 1)
            self.bin_total[b] += 1
            self.bin_accepted[b] += index < result.num_accepted
        self._calibration = None

    def _learn_costs(self, result: RoundResult) -> None:
        unseen = result.num_verified - result.num_drafted  # tokens the target had not seen
        if unseen == 1:  # no catch-up (prompt) inside
            times = self.verify_times.setdefault(
                result.num_verified, deque(maxlen=self.config.window)
            )
            times.append(result.target_time_s)
            self._line = None
        elif unseen >= self.config.min_prefill_tokens:
            self.prefill_costs.append(result.target_time_s / result.num_verified)
            self._line = None
        if result.draft_forwards and result.draft_catchup <= 2:
            self.draft_costs.append(result.draft_time_s / result.draft_forwards)
        elif result.draft_forwards and self.draft_costs:
            # The first forward fed the whole catch-up; the others one token each.
            decode = (result.draft_forwards - 1) * statistics.median(self.draft_costs)
            catchup = max(result.draft_time_s - decode, 0.0)
            self.catchup_costs.append(catchup / result.draft_catchup)

    def _learn_rate(self, result: RoundResult) -> None:
        if result.num_verified != result.num_drafted + 1:
            return
        steps = (result.draft_time_s + result.target_time_s) / self._step_time()
        if steps <= 0:
            return
        decay = self.config.rate_decay
        round_rate = (result.num_accepted + 1) / steps
        self.rate = decay * self.rate + (1 - decay) * round_rate

    def _fit_calibration(self) -> list[float]:
        """Per-bin acceptance with a calibrated prior, made non-decreasing (PAV)."""
        cfg = self.config
        bins = cfg.calibration_bins
        means, weights = [], []
        for b in range(bins):
            prior = (b + 0.5) / bins
            total = self.bin_total[b] + cfg.prior_weight
            means.append((self.bin_accepted[b] + cfg.prior_weight * prior) / total)
            weights.append(total)
        return pool_adjacent_violators(means, weights)

    def _verify_line(self) -> tuple[float, float]:
        """(V(1) seconds, slope seconds/token), cached until the next measurement."""
        if self._line is None:
            self._line = self._fit_verify_line()
        return self._line

    def _fit_verify_line(self) -> tuple[float, float]:
        """Weighted least squares over the per-n median verification times."""
        points = [(n, statistics.median(t), len(t)) for n, t in self.verify_times.items() if t]
        if not points:
            return 1.0, self.config.prior_verify_slope
        if len(points) == 1:
            n, median, _ = points[0]
            if n == 1 and self.prefill_costs:  # a prefill is a forward over many tokens
                return median, statistics.median(self.prefill_costs)
            intercept = median / (1 + self.config.prior_verify_slope * (n - 1))
            return intercept, self.config.prior_verify_slope * intercept
        total = sum(w for _, _, w in points)
        mean_n = sum(n * w for n, _, w in points) / total
        mean_t = sum(t * w for _, t, w in points) / total
        var = sum(w * (n - mean_n) ** 2 for n, _, w in points)
        cov = sum(w * (n - mean_n) * (t - mean_t) for n, t, w in points)
        slope = max(cov / var, 0.0)
        intercept = mean_t - slope * (mean_n - 1)
        if intercept <= 0:  # degenerate noise: fall back to the single-token median
            intercept = mean_t
        return intercept, slope

    def _step_time(self) -> float:
        """Seconds of one target step (V(1)); 1.0 before anything is measured."""
        return self._verify_line()[0]


def pool_adjacent_violators(values: list[float], weights: list[float]) -> list[float]:
    """Weighted isotonic (non-decreasing) regression of `values`."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights, strict=True):
        blocks.append([value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean2, w2, c2 = blocks.pop()
            mean1, w1, c1 = blocks.pop()
            blocks.append([(mean1 * w1 + mean2 * w2) / (w1 + w2), w1 + w2, c1 + c2])
    fitted: list[float] = []
    for mean, _, count in blocks:
        fitted.extend([mean] * int(count))
    return fitted
