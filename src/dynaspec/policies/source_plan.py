"""Prompt lookup in the cost-aware rule: which source drafts a round, and how far.

A round may start with tokens copied by prompt lookup (drafters/prompt_lookup.py) and the
draft model may carry on after them (drafters/hybrid.py). The rule is extended with the
same argument as in adaptive.py (renewal-reward, Dinkelbach): a round should maximise
E(plan) - rho * t(plan), expected tokens minus the achieved rate rho (>= 1) times its cost in
target steps. V(n) is the cost of verifying n tokens, c the draft model's cost per token.

Copied tokens
-------------
A match offers L tokens. Let b_j be the probability that copied token j is accepted given
that tokens 1 .. j-1 were, and Q_j = b_1 * ... * b_j. b_j is learned online as a function
of how far back the source agrees with the text before token j: the match's agreement ell
plus the j - 1 copied tokens accepted before it (lookup_acceptance.py), so a copy that has
run on is trusted more than its first token. Copying runs no model, so its draft cost is 0:
m copied tokens yield 1 + Q_1 + ... + Q_m tokens for V(m + 1) steps, and copied token j
pays exactly when

    Q_j  >  rho * (V(j + 1) - V(j))

(the model's rule with c = 0). Q_j falls with j and the fitted V is a line, so the best m is
the first j where this fails. On a GPU V is nearly flat and a good match is copied whole;
on a CPU without bf16 kernels each verified token costs about half a step, and only the
copied tokens likely to be accepted are sent. When the rule keeps declining, a rare probe
copies one token anyway (lookup_acceptance.py), so the estimates stay fresh.

The draft model carrying on
---------------------------
After m copied tokens the model may draft more. Before drafting, its tokens are modelled
as in `AdaptivePolicy.expected_rate`, each accepted with the first-token acceptance a:
k model tokens add Q_m * (a + ... + a^k) tokens and cost k c + V(m + k + 1) - V(m + 1).
The model must first be fed the m copied tokens (with any committed ones it missed) in its
first forward, a catch-up of kappa steps per token (`catchup_cost`). A committed token fed
now spares feeding it at the model's next round, so only the copied tokens that will be
rejected are wasted: m - (Q_1 + ... + Q_m) of them in expectation. The model carries on when

    G(m) = max_k sum_{i <= k} [Q_m a^i - rho (c + V(m + i + 1) - V(m + i))]
         > rho * kappa * (m - Q_1 - ... - Q_m)

and a lagging model is worth starting at all (`worth_starting`); its own rule
(`should_stop`, with the prefix probability starting at Q_m and the token index at m) then
decides how far. Otherwise it stands aside and falls behind by the tokens committed. A long
continuation has a small Q_m, so the model stands aside while long matches are copied.

Which source first
------------------
With a match, the plan "copy m, then maybe the model" is worth
sum_j Q_j - rho (V(m + 1) - 1) + max(0, G(m) - rho * waste), and "the model alone" (when its
unchanged rule wants to draft) G(0). The larger wins. Without a match the round is the
model's unchanged rule, and with no draft model, the copy alone.

Everything the plan uses (the match, its length, the learned b, the costs, rho) is known
before the round: it depends on the committed tokens only, never on a token drafted in the
same round, so the choice of source cannot bias sampling. (The model's own stop inside its
continuation depends on its drafted tokens, as in every schedule: that changes how many
tokens are checked, not the distribution each was drawn from.)

Assumptions: copied tokens are accepted independently of the model, with a probability
that depends only on how many tokens before them agree with their source (and does not
fall as that agreement grows); after a copy the model
is accepted as often as on its first token of a round; copying costs nothing beyond
bookkeeping; the model drafts again later in the call (so feeding it committed tokens is
not wasted).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from dynaspec.core.protocols import DraftOptions, DraftPlan, RoundResult

if TYPE_CHECKING:
    from dynaspec.policies.lookup_acceptance import LookupAcceptance


class SourcePlanning:
    """The source choice of `AdaptivePolicy` (mixed into it): `plan_sources` and the learning
    of copied tokens. It uses the host's estimates (rate, costs, first-token acceptance) and
    its round state (`_prefix`, `_probing`)."""

    lookup: LookupAcceptance  # set by the host's reset()

    def plan_sources(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        """The sources of the next round (module docstring)."""
        catchup = options.model_catchup
        if not options.lookup_tokens:  # no match: the model's own rule, unchanged
            return DraftPlan(0, self.max_lookahead(catchup, remaining) if catchup else 0)
        rho = max(self.rate, 1.0)
        probs = self.lookup.prefix_probs(options.lookup_match, options.lookup_tokens)
        copied = 0
        while copied < len(probs) and probs[copied] > rho * self._verify_step(copied + 1):
            copied += 1
        copied = self.lookup.probe(copied)  # 1 now and then when it keeps declining
        alone = self.max_lookahead(catchup, remaining) if catchup else 0
        if not copied:
            return DraftPlan(0, alone)
        expected = sum(probs[:copied])
        value = expected - rho * (self.verify_cost(copied + 1) - 1.0)
        carry = self._carry_on_value(probs[copied - 1], copied, catchup, expected, remaining)
        if alone and self.continuation_value(1.0, 0) > value + max(carry, 0.0):
            return DraftPlan(0, alone)  # the model alone is worth more than the copy
        self._probing = False
        if carry <= 0.0:
            return DraftPlan(copied, 0)  # the model stands aside
        self._prefix = probs[copied - 1]
        return DraftPlan(copied, max(self.config.max_tokens - copied, 0))

    def continuation_value(self, prefix: float, offset: int) -> float:
        """G: the most the model's tokens after `offset` drafted ones (all accepted with
        probability `prefix`) are expected to gain over their cost, in tokens, before any
        confidence is seen (each accepted with the first-token acceptance)."""
        accept, cost, rho = self.first_token_acceptance(), self.draft_cost(), max(self.rate, 1.0)
        best = total = 0.0
        for index in range(offset, self.config.max_tokens):
            prefix *= accept
            total += prefix - rho * (cost + self._verify_step(index + 1))
            best = max(best, total)
        return best

    def _carry_on_value(
        self,
        prefix: float,
        copied: int,
        catchup: int | None,
        expected: float,
        remaining: int | None,
    ) -> float:
        """G(m) - rho * (wasted catch-up), or 0 when the model cannot carry on."""
        if catchup is None or not self.worth_starting(catchup, remaining):
            return 0.0
        feed = self.catchup_cost(copied + 1)  # the m copied tokens, in target steps
        if feed is None:
            return 0.0
        wasted = feed * (copied - expected) / copied
        return self.continuation_value(prefix, copied) - max(self.rate, 1.0) * wasted

    def _verify_step(self, num_drafted: int) -> float:
        """V(k + 1) - V(k): what verifying drafted token k costs on top (target steps)."""
        return self.verify_cost(num_drafted + 1) - self.verify_cost(num_drafted)

    def _learn_lookup(self, result: RoundResult) -> RoundResult:
        """Learns the copied tokens' outcomes; returns the round as the draft model saw it
        (no tokens when a copied one was rejected: the model's were never judged)."""
        copied = result.num_lookup
        if not copied:
            return result
        self.lookup.learn(result.lookup_match, copied, result.num_accepted)
        if result.num_accepted < copied:
            return replace(result, num_drafted=0, num_accepted=0, confidences=())
        return replace(
            result,
            num_drafted=result.num_drafted - copied,
            num_accepted=result.num_accepted - copied,
            confidences=result.confidences[copied:],
        )
