"""The default plan and stopper, for policies that only set a lookahead per round."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dynaspec.core.round import CopySource, DraftOptions, DraftPlan, DraftStep, Round, StopReason


def default_plan(
    options: DraftOptions,
    lookahead: Callable[[int, int | None], int],
    remaining: int | None,
) -> DraftPlan:
    """Copy the whole match, then let the draft model carry on up to `lookahead(catchup,
    remaining)` tokens in all (the copied ones count, and are part of its catch-up). The
    match is prompt lookup's, as in transformers; the suffix cache's only where prompt lookup
    offers none."""
    source = CopySource.SUFFIX if options.num_suffix and not options.num_copy else None
    copy = options.num_suffix if source else options.num_copy
    source = source or CopySource.LOOKUP
    if options.catchup is None:
        return DraftPlan(copy, 0, source=source)
    total = lookahead(options.catchup + copy, remaining)
    return DraftPlan(copy, max(total - copy, 0), source=source)


@dataclass(frozen=True)
class RuleStopper:
    """A stop rule that keeps nothing within a round."""

    rule: Callable[[DraftStep], bool]
    reason: StopReason
    needs_confidence: bool

    def should_stop(self, step: DraftStep) -> bool:
        return self.rule(step)


class Schedule:
    """A policy that sets the most tokens to draft per round (`max_lookahead`) and may stop
    early (`should_stop`); it gets the default plan and stopper. Subclass it for a policy of
    your own."""

    name = "schedule"
    stop_reason = StopReason.MAX  # recorded when should_stop() returns True
    # False: should_stop decides nothing from single drafted tokens, so the drafter may
    # draft the whole lookahead without reading each token back from the device.
    needs_confidence = False

    def reset(self) -> None:
        pass

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        """The most tokens to draft this round (0: none); catchup = tokens the draft must be
        fed before its first proposal, remaining = tokens the call may still emit."""
        raise NotImplementedError

    def should_stop(self, step: DraftStep) -> bool:
        return False

    def update(self, round: Round) -> None:
        pass

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        return default_plan(options, self.max_lookahead, remaining)

    def stopper(self, plan: DraftPlan) -> RuleStopper:
        return RuleStopper(self.should_stop, self.stop_reason, self.needs_confidence)
