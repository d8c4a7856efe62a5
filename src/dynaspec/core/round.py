"""The values of one speculative round, in the order the loop makes them.

    options  = drafter.offer(tokens)            DraftOptions: what the sources could propose
    plan     = policy.plan(options, remaining)  DraftPlan: copy m tokens, then at most j more
    stopper  = policy.stopper(plan)             Stopper: should_stop(step) during this round
    proposal = drafter.propose(...)             Proposal: the drafted tokens and their cost
    record   = Round(...)                       Round: what happened, read by everyone after

Each is built once and never changed; nothing of a round lives on after it except in the
`Round` record (the policy learns from it, the stats keep it, the instruments read it). The
words are those of the glossary in docs/design/architecture.md ("Glossary").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import torch


class StopReason(str, Enum):
    """Why drafting stopped in a round (equal to its string value: `"max"`)."""

    NONE = "none"  # nothing was planned: the target decoded one token alone
    MAX = "max"  # the planned tokens were all drafted
    LENGTH = "length"  # the tokens the call may still emit cut the plan
    EOS = "eos"  # the draft proposed an end-of-sequence token
    CONFIDENCE = "confidence"  # the dynamic rule: the draft's confidence fell below threshold
    COST = "cost"  # the adaptive rule: one more token was not expected to pay
    ORACLE = "oracle"  # the oracle: the draft disagreed with the known target output

    def __str__(self) -> str:
        return self.value


class CopySource(str, Enum):
    """Where a round's copied tokens come from (equal to its string value: `"lookup"`)."""

    LOOKUP = "lookup"  # prompt lookup: the request's own prompt and text so far
    SUFFIX = "suffix"  # the suffix cache: what earlier requests' texts went on with

    def __str__(self) -> str:
        return self.value


class Choice(str, Enum):
    """What a source's own rule chose before a round; its prober learns from it."""

    CHOSEN = "chosen"  # the rule chose to draft with the source
    PROBED = "probed"  # the rule declined, but a probe drafted one token anyway
    DECLINED = "declined"  # the rule declined and no probe was due

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class DraftOptions:
    """What the draft sources offer before a round: a function of the committed tokens only."""

    catchup: int | None  # tokens the draft model must be fed before its first proposal
    #                      (1: in step); None: there is no draft model
    copy: torch.Tensor | None = None  # (L,) the prompt-lookup continuation on offer
    agreement: int = 0  # tokens the match agrees on, back from the newest (0: no match)
    search_s: float = 0.0  # wall time of the prompt-lookup search
    started: bool = True  # the draft model holds tokens (False: it has not run yet, so its
    #                       catch-up is the whole prompt's prefill)
    checks: bool = False  # the draft model can check a copy (DraftPlan.checked): a draft of
    #                       the target's vocabulary, which takes the continuation as a guess
    suffix: torch.Tensor | None = None  # (L,) the suffix cache's continuation on offer
    suffix_agreement: int = 0  # tokens its context agrees on, back from the newest
    suffix_frequencies: tuple[float, ...] = ()  # (L,) how often each of its tokens followed
    #                                             the ones before it (SuffixMatch)

    @property
    def num_copy(self) -> int:
        """Tokens on offer from prompt lookup (0: no match)."""
        return 0 if self.copy is None else self.copy.numel()

    @property
    def num_suffix(self) -> int:
        """Tokens on offer from the suffix cache (0: none)."""
        return 0 if self.suffix is None else self.suffix.numel()

    @property
    def offers_copy(self) -> bool:
        """Whether either copy source offers tokens."""
        return bool(self.num_copy or self.num_suffix)

    def chosen(self, source: CopySource) -> DraftOptions:
        """The offer as the copying code reads it: `copy` and `agreement` those of `source`
        (the suffix cache's, or prompt lookup's as they are)."""
        if source is not CopySource.SUFFIX:
            return self
        return replace(self, copy=self.suffix, agreement=self.suffix_agreement)


@dataclass(frozen=True)
class DraftPlan:
    """Which sources draft in a round, and how far; fixed before any token is drafted."""

    copy: int = 0  # propose this many copied (prompt-lookup) tokens first
    model: int = 0  # then at most this many draft-model tokens (0: the model stands aside)
    probe: bool = False  # the model drafts only to keep the policy's estimates fresh
    copy_choice: Choice | None = None  # the copy rule's choice (None: no match, or no rule)
    copy_accepted: float = 1.0  # the policy's estimate that every copied token is accepted
    guess: int = 0  # of the lookup continuation after the copied tokens, this many are fed
    #                 to the draft model as a guess of its own next tokens (drafters/
    #                 draft_model.py): one forward drafts as many of them as it agrees with
    checked: int = 0  # of the guessed tokens, the draft drafts this many first without its
    #                   stopper's say while it agrees with them: a copy it checks, instead
    #                   of copying it (policies/source_plan.py)
    worth: float = 1.0  # in a batch, what one of the row's tokens is worth to the batch's
    #                     time (0: the row has ended; policies/batch_adaptive.py)
    source: CopySource = CopySource.LOOKUP  # where the copied (and guessed, checked) tokens
    #                                         come from

    @property
    def total(self) -> int:
        return self.copy + self.model

    def within(self, most: int) -> DraftPlan:
        """The plan cut to at most `most` tokens: copied tokens first, then the model's."""
        copy = min(self.copy, most)
        model = min(self.model, most - copy)
        guess = min(self.guess, max(model - 1, 0))
        return replace(self, copy=copy, model=model, guess=guess, checked=min(self.checked, guess))


@dataclass(frozen=True)
class DraftStep:
    """What the loop knows right after the draft model proposed one token."""

    index: int  # 0-based index of this token within the round's draft (copied ones first)
    position: int  # index the token would take in the committed token sequence
    token: int  # the proposed token id
    confidence: float  # the draft's processed probability of `token`


@dataclass(frozen=True)
class Proposal:
    """The tokens a drafter proposes in one round, and what proposing them cost."""

    tokens: torch.Tensor  # (k,) proposed token ids, k >= 0; copied ones first
    probs: torch.Tensor | None  # (k, V) proposal distributions (sampling only), else None
    confidences: tuple[float, ...]  # the drafter's probability of each token (copied: 1.0)
    stop_reason: StopReason = StopReason.MAX  # MAX, EOS, or the stopper's reason
    draft_time_s: float = 0.0  # wall time spent proposing (search and catch-up included)
    draft_forwards: int = 0  # draft model forward calls
    catchup: int = 0  # tokens fed to the draft model's first forward (0: it did not run)
    num_copied: int = 0  # of `tokens`, the first ones copied by prompt lookup
    agreement: int = 0  # the copy's agreement (0: nothing copied)
    guess_fed: int = 0  # guessed tokens fed to the draft model (DraftPlan.guess)
    guess_hits: int = 0  # of the model's tokens, those drafted in a guessed row: no forward
    #                      of their own


@dataclass(frozen=True)
class Round:
    """One speculative round (or one plain target step when nothing was drafted): the one
    record of a round, read by the policy, the stats, the oracle replay and the bench."""

    plan: DraftPlan  # what the policy planned, cut to the tokens the call may still emit
    stop_reason: StopReason  # why drafting stopped
    num_drafted: int  # tokens proposed: copied, then the draft model's
    num_copied: int  # of those, the first ones copied by prompt lookup
    num_accepted: int  # drafted tokens the target accepted (a prefix of the draft)
    num_emitted: int  # tokens committed: accepted + the target's own, cut at EOS/length/stop
    num_verified: int  # tokens in the target's forward: unseen committed + drafted
    agreement: int  # the copy's agreement (0: nothing copied)
    catchup: int  # tokens fed to the draft model's first forward (0: it did not run)
    draft_forwards: int  # draft model forward calls (catch-up included)
    confidences: tuple[float, ...]  # the drafter's probability of each drafted token
    draft_time_s: float  # wall time proposing (draft forwards, lookup search)
    target_time_s: float  # wall time of the target's verification forward
    other_time_s: float = 0.0  # the rest of the round: sampling, verification, bookkeeping
    guess_fed: int = 0  # tokens fed to the draft model as a guess of its own (DraftPlan.guess)
    guess_hits: int = 0  # of the model's tokens, those drafted without a forward of their own

    @property
    def time_s(self) -> float:
        return self.draft_time_s + self.target_time_s + self.other_time_s

    @property
    def num_model(self) -> int:
        """Tokens the draft model proposed (after the copied ones)."""
        return self.num_drafted - self.num_copied
