"""What drafting and verifying cost on this machine, measured online, in target steps
(docs/design/adaptive.md ("Estimates")): medians over a window of recent rounds (a median ignores
the occasional slow step), and V(n) as a least-squares line through the per-n medians.

c is the cost of a draft per *target* token it proposes: a draft forward's cost over the
target tokens a forward yields. The two are the same where the draft drafts target tokens;
a draft of another tokenizer drafting through text (drafters/cross_tokenizer.py) yields
fewer target tokens than forwards where its tokens are shorter, more where they are longer,
and none in a round whose text does not re-encode (docs/cross-tokenizer.md)."""

from __future__ import annotations

import statistics
from collections import deque

from dynaspec.core.round import Round

# A guessed token's cost against a draft forward's until measured: on a 2-core AVX512-BF16
# EPYC the 4-bit draft's forward over 1 + g tokens (g = 1..32) costs about 1 + 0.13 g of one
# over 1 token (15 ms, 1.9 ms per token more).
PRIOR_GUESS_PRICE = 0.2


class CostModel:
    """c (a draft token), V(n) (verifying n tokens) and the catch-up, in target steps."""

    def __init__(
        self,
        prior_draft_cost: float,
        prior_verify_slope: float,
        window: int,
        min_prefill_tokens: int,
        prior_forwards: int = 8,
    ) -> None:
        self.prior_draft_cost = prior_draft_cost  # c until measured
        self.prior_verify_slope = prior_verify_slope  # V's slope until measured
        self.window = window  # rounds kept for the medians
        self.min_prefill_tokens = min_prefill_tokens  # a target forward over at least this
        #                                 many unseen tokens times the prefill (per token)
        self.draft_costs: deque[float] = deque(maxlen=window)  # seconds per draft forward
        self.yields: deque[tuple[int, int]] = deque(maxlen=window)  # (target tokens the
        #                                 draft proposed, its forwards) per round it ran
        self.prior_forwards = prior_forwards  # forwards of one target token each behind
        #                 the measured yield: a short first draft, whose text's tail does
        #                 not re-encode yet, must not set it alone
        self.catchup_costs: deque[float] = deque(maxlen=window)  # s per catch-up token
        self.prefill_costs: deque[float] = deque(maxlen=window)  # target s per prompt token
        self.verify_times: dict[int, deque[float]] = {}  # width verified -> recent seconds
        # Widths the target's forwards are padded to (backends/graphs.py: a verification of
        # 9 tokens runs, and costs, as one of 16), () when not padded: set by `use_buckets`.
        self.buckets: tuple[int, ...] = ()
        self._line: tuple[float, float, float] | None = None  # cached V(n) fit, None: stale
        self._bucket_table: dict[int, float] = {}  # V per bucket, in steps, with _line

    def take_token_costs(self, other: CostModel) -> None:
        """The per-token times of `other` (a prefill's, a catch-up's): those of a forward over
        many tokens, which hardly depend on how many rows share it, unlike a step's."""
        self.prefill_costs.extend(other.prefill_costs)
        self.catchup_costs.extend(other.catchup_costs)
        self._line = None

    @property
    def measured(self) -> bool:
        """Whether a target step has been timed (before that, steps are 1.0 s)."""
        return bool(self.verify_times)

    @property
    def steps_timed(self) -> int:
        """Single-token target steps timed in the window."""
        return len(self.verify_times.get(1, ()))

    def draft_cost(self) -> float:
        """c: draft time per proposed target token, in target steps."""
        return self.forward_cost() / self.tokens_per_forward()

    def forward_cost(self) -> float:
        """A draft forward's time (one draft token), in target steps."""
        if not self.draft_costs or not self.verify_times:
            return self.prior_draft_cost
        return statistics.median(self.draft_costs) / self.step_time()

    def tokens_per_forward(self) -> float:
        """Target tokens the draft proposes per forward, over the recent rounds it ran and
        `prior_forwards` of one token each (1.0 until `learn_yield` has seen a round; at
        least one token over the forwards)."""
        tokens = self.prior_forwards + sum(tokens for tokens, _ in self.yields)
        forwards = self.prior_forwards + sum(forwards for _, forwards in self.yields)
        return max(tokens, 1) / max(forwards, 1)

    def learn_yield(self, round: Round) -> None:
        """The target tokens the draft model proposed in `round` per forward it ran (a
        single sequence's round: a batch's combined round pairs one row's forwards with
        another row's tokens)."""
        if round.draft_forwards:  # tokens a guess let it draft are not the draft's yield
            self.yields.append((round.num_model - round.guess_hits, round.draft_forwards))

    def use_buckets(self, buckets: tuple[int, ...]) -> None:
        """The target pads its forwards to these widths: V(n) is V(bucket of n), and each
        bucket's time is learned on its own."""
        self.buckets = tuple(sorted(buckets))
        self._line = None

    def width(self, num_tokens: int) -> int:
        """The width a forward over num_tokens runs at: its bucket, or itself (none holds it)."""
        return next((bucket for bucket in self.buckets if bucket >= num_tokens), num_tokens)

    def verify_cost(self, num_tokens: int) -> float:
        """V(n): target time to verify num_tokens tokens, in target steps (V(1) = 1); with
        buckets, V of the bucket: its own median where timed, else the line's value, never
        below a smaller bucket's."""
        step, base, slope = self._verify_line()
        if num_tokens <= 1:
            return 1.0
        width = self.width(num_tokens)
        if width in self._bucket_table:
            return self._bucket_table[width]
        return max(base + slope * (width - 1), step) / step

    def catchup_cost(self, catchup: int) -> float | None:
        """Target steps to feed a lagging draft the catchup - 1 tokens (its own) beyond the
        usual one; None while no target step has been timed. Per token: the timed catch-ups,
        else a draft forward's cost f times the target's prefill (per token, in steps), never
        more than f (a forward over m tokens costs at most m forwards over one), and f while
        neither has been timed."""
        if catchup <= 1:
            return 0.0
        if not self.verify_times:
            return None
        per_token = self.forward_cost()
        if self.catchup_costs:
            per_token = min(per_token, statistics.median(self.catchup_costs) / self.step_time())
        elif self.prefill_costs:  # the draft's prefill ~ f times the target's
            prefill = statistics.median(self.prefill_costs) / self.step_time()
            per_token = min(per_token, per_token * prefill)
        return (catchup - 1) * per_token

    def guess_price(self) -> float:
        """What a guessed token fed to a draft forward costs against a forward of its own:
        a catch-up token's time over a forward's, PRIOR_GUESS_PRICE until both are timed."""
        if not self.catchup_costs or not self.draft_costs:
            return PRIOR_GUESS_PRICE
        return statistics.median(self.catchup_costs) / statistics.median(self.draft_costs)

    def learn_prefill(self, tokens: int, seconds: float) -> None:
        """A target forward over `tokens` unseen tokens (a prompt) took `seconds`: its time
        per token (what prices a draft's catch-up), where it is long enough to tell."""
        if tokens >= self.min_prefill_tokens and seconds > 0:
            self.prefill_costs.append(seconds / tokens)
            self._line = None

    def step_time(self) -> float:
        """Seconds of one target step (V(1)); 1.0 before anything is measured."""
        return self._verify_line()[0]

    def learn(self, round: Round) -> None:
        unseen = round.num_verified - round.num_drafted  # tokens the target had not seen
        if unseen == 1:  # no catch-up (prompt) inside
            width = self.width(round.num_verified)
            times = self.verify_times.setdefault(width, deque(maxlen=self.window))
            times.append(round.target_time_s)
            self._line = None
        elif unseen >= self.min_prefill_tokens:
            self.learn_prefill(round.num_verified, round.target_time_s)
        if round.draft_forwards and round.catchup <= 2 and not round.guess_fed:
            self.draft_costs.append(round.draft_time_s / round.draft_forwards)
        elif round.draft_forwards and round.catchup > 2 and self.draft_costs:
            # The first forward fed the catch-up and any guess; the others one token each.
            decode = (round.draft_forwards - 1) * statistics.median(self.draft_costs)
            catchup = max(round.draft_time_s - decode, 0.0)
            self.catchup_costs.append(catchup / (round.catchup + round.guess_fed))

    def _verify_line(self) -> tuple[float, float, float]:
        """(V(1) seconds, the line for n >= 2 at n = 1 in seconds, its slope in seconds per
        token), cached until the next measurement."""
        if self._line is None:
            self._line = self._fit_verify_line()
            self._bucket_table = self._fit_buckets(*self._line)
        return self._line

    def _fit_buckets(self, step: float, base: float, slope: float) -> dict[int, float]:
        """V per bucket past 1, in steps: a bucket's median where timed, else the line's value;
        at least the bucket before's (a wider forward never costs less)."""
        table: dict[int, float] = {}
        floor = 1.0
        for bucket in self.buckets:
            if bucket <= 1:
                continue
            times = self.verify_times.get(bucket)
            seconds = statistics.median(times) if times else base + slope * (bucket - 1)
            floor = max(floor, seconds / step)
            table[bucket] = floor
        return table

    def _fit_verify_line(self) -> tuple[float, float, float]:
        """V(1) is the median single-token step; V(n >= 2) a weighted least-squares line
        through the per-n medians of forwards over several tokens. The two are kept apart
        because a forward over 2 tokens may cost far more than one over 1 (measured: 2.7x
        on an AVX2 CPU in float32 with transformers' cache, where one token takes a
        matrix-vector path and several a matrix product that repacks the weights), and a
        line through both would make the step look dearer than it is. Without multi-token
        times the slope is the prefill's time per token (capped at a step) or the prior;
        without single-token times the step is the line's value at n = 1."""
        single = self.verify_times.get(1)
        step = statistics.median(single) if single else None
        slope = None if step is None else self.prior_verify_slope * step  # s per token
        if step is not None and self.prefill_costs:  # a prefill is a forward over many
            # tokens; verifying n at once costs at most n steps (a cold prefill is capped)
            slope = min(statistics.median(self.prefill_costs), step)
        points = [(n, statistics.median(t), len(t)) for n, t in self.verify_times.items()]
        points = [point for point in points if point[0] > 1]
        if not points:
            return (1.0, 1.0, self.prior_verify_slope) if step is None else (step, step, slope)
        base, slope = _line(points, slope, self.prior_verify_slope, step)
        if step is None:
            return base, base, slope
        # A forward over several tokens costs at least one over 1: a slow single-token
        # median (a cold step) is capped by the fastest multi-token one.
        return min(step, *(median for _, median, _ in points)), base, slope


def _line(
    points: list[tuple[int, float, int]],
    slope: float | None,
    prior_slope: float,
    anchor: float | None = None,
) -> tuple[float, float]:
    """(value at n = 1, slope) of the weighted least-squares line through (n, seconds,
    weight); through one point, with the `slope` known so far (seconds per token), else
    the prior slope (in steps of the line's own n = 1). Where the line would reach n = 1 at
    or below 0 (a few noisy points far from n = 1), it is fitted through (1, `anchor`), the
    single step, when one is timed."""
    if len(points) == 1:
        n, median, _ = points[0]
        if slope is None:
            intercept = median / (1 + prior_slope * (n - 1))
            return intercept, prior_slope * intercept
        return max(median - slope * (n - 1), median / n), slope
    total = sum(w for _, _, w in points)
    mean_n = sum(n * w for n, _, w in points) / total
    mean_t = sum(t * w for _, t, w in points) / total
    var = sum(w * (n - mean_n) ** 2 for n, _, w in points)
    cov = sum(w * (n - mean_n) * (t - mean_t) for n, t, w in points)
    slope = max(cov / var, 0.0)
    intercept = mean_t - slope * (mean_n - 1)
    if intercept > 0:
        return intercept, slope
    if anchor is not None:  # through the timed step: what a forward over one token costs
        rise = sum(w * (n - 1) * (t - anchor) for n, t, w in points)
        run = sum(w * (n - 1) ** 2 for n, _, w in points)
        return anchor, max(rise / run, 0.0)
    return mean_t, slope  # degenerate noise and no step: fall back to the mean
