"""Probes: when a source's rule keeps declining to draft, draft a little anyway now and then,
so that a noisy early estimate cannot switch the source off for good. Each probe waits twice
as long as the last, until the rule chooses the source on its own again."""

from __future__ import annotations

from dynaspec.core.round import Choice


class Prober:
    """Counts the rounds a source's rule declined; a probe is due after `interval` of them."""

    def __init__(self, interval: int, max_interval: int) -> None:
        self.first_interval = interval
        self.max_interval = max_interval
        self.interval = interval  # declined rounds before the next probe
        self.waited = 0  # rounds declined since the source last drafted

    def due(self, counting_this: bool = False) -> bool:
        """Whether a probe is due (`counting_this`: count the round being planned as
        declined too)."""
        return self.waited + counting_this >= self.interval

    def learn(self, choice: Choice) -> None:
        """What the round did with the source: chosen by the rule, a probe, or declined."""
        if choice is Choice.DECLINED:
            self.waited += 1
            return
        self.waited = 0
        if choice is Choice.PROBED:  # each probe waits twice as long as the last ...
            self.interval = min(2 * self.interval, self.max_interval)
        else:  # ... until the rule chooses the source again
            self.interval = self.first_interval
