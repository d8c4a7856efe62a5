"""What drafting and verifying cost on this machine, measured online, in target steps
(docs/adaptive.md ("Estimates")): medians over a window of recent rounds (a median ignores
the occasional slow step), and V(n) as a least-squares line through the per-n medians."""

from __future__ import annotations

import statistics
from collections import deque

from dynaspec.core.round import Round


class CostModel:
    """c (a draft token), V(n) (verifying n tokens) and the catch-up, in target steps."""

    def __init__(
        self,
        prior_draft_cost: float,
        prior_verify_slope: float,
        window: int,
        min_prefill_tokens: int,
    ) -> None:
        self.prior_draft_cost = prior_draft_cost  # c until measured
        self.prior_verify_slope = prior_verify_slope  # V's slope until measured
        self.window = window  # rounds kept for the medians
        self.min_prefill_tokens = min_prefill_tokens  # a target forward over at least this
        #                                 many unseen tokens times the prefill (per token)
        self.draft_costs: deque[float] = deque(maxlen=window)  # seconds per draft token
        self.catchup_costs: deque[float] = deque(maxlen=window)  # s per catch-up token
        self.prefill_costs: deque[float] = deque(maxlen=window)  # target s per prompt token
        self.verify_times: dict[int, deque[float]] = {}  # n verified -> recent seconds
        self._line: tuple[float, float] | None = None  # cached V(n) fit, None when stale

    @property
    def measured(self) -> bool:
        """Whether a target step has been timed (before that, steps are 1.0 s)."""
        return bool(self.verify_times)

    @property
    def slope_measured(self) -> bool:
        """Whether a target forward over several tokens (without a catch-up) has been timed;
        until then V's slope is the prefill's time per token, or the prior."""
        return any(n > 1 and times for n, times in self.verify_times.items())

    def draft_cost(self) -> float:
        """c: draft time per token in target steps."""
        if not self.draft_costs or not self.verify_times:
            return self.prior_draft_cost
        return statistics.median(self.draft_costs) / self.step_time()

    def verify_cost(self, num_tokens: int) -> float:
        """V(n): target time to verify num_tokens tokens, in target steps (V(1) = 1)."""
        intercept, slope = self._verify_line()
        return 1.0 + slope * (num_tokens - 1) / intercept

    def catchup_cost(self, catchup: int) -> float | None:
        """Target steps to feed a lagging draft the catchup - 1 tokens beyond the usual one;
        None while no target step has been timed. Per token: the timed catch-ups, else c
        times the target's prefill (per token, in steps), never more than c (a forward over
        m tokens costs at most m forwards over one), and c while neither has been timed."""
        if catchup <= 1:
            return 0.0
        if not self.verify_times:
            return None
        per_token = self.draft_cost()
        if self.catchup_costs:
            per_token = min(per_token, statistics.median(self.catchup_costs) / self.step_time())
        elif self.prefill_costs:  # the draft's prefill ~ c times the target's
            prefill = statistics.median(self.prefill_costs) / self.step_time()
            per_token = min(per_token, per_token * prefill)
        return (catchup - 1) * per_token

    def step_time(self) -> float:
        """Seconds of one target step (V(1)); 1.0 before anything is measured."""
        return self._verify_line()[0]

    def learn(self, round: Round) -> None:
        unseen = round.num_verified - round.num_drafted  # tokens the target had not seen
        if unseen == 1:  # no catch-up (prompt) inside
            times = self.verify_times.setdefault(round.num_verified, deque(maxlen=self.window))
            times.append(round.target_time_s)
            self._line = None
        elif unseen >= self.min_prefill_tokens:
            self.prefill_costs.append(round.target_time_s / round.num_verified)
            self._line = None
        if round.draft_forwards and round.catchup <= 2:
            self.draft_costs.append(round.draft_time_s / round.draft_forwards)
        elif round.draft_forwards and self.draft_costs:
            # The first forward fed the whole catch-up; the others one token each.
            decode = (round.draft_forwards - 1) * statistics.median(self.draft_costs)
            catchup = max(round.draft_time_s - decode, 0.0)
            self.catchup_costs.append(catchup / round.catchup)

    def _verify_line(self) -> tuple[float, float]:
        """(V(1) seconds, slope seconds/token), cached until the next measurement."""
        if self._line is None:
            self._line = self._fit_verify_line()
        return self._line

    def _fit_verify_line(self) -> tuple[float, float]:
        """Weighted least squares over the per-n median verification times; while only
        single-token steps are timed, the slope is the target's prefill time per token."""
        points = [(n, statistics.median(t), len(t)) for n, t in self.verify_times.items() if t]
        slope_prior = self.prior_verify_slope
        if not points:
            return 1.0, slope_prior
        if len(points) == 1:
            n, median, _ = points[0]
            if n == 1 and self.prefill_costs:  # a prefill is a forward over many tokens;
                # verifying n tokens at once costs at most n steps (a cold prefill is capped)
                return median, min(statistics.median(self.prefill_costs), median)
            intercept = median / (1 + slope_prior * (n - 1))
            return intercept, slope_prior * intercept
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
