"""Which request each row of a vLLM step is, without request ids (vLLM passes none).

A custom proposer sees, per step and per row of the engine's input batch, the committed
tokens (`token_ids_cpu[row, :num_tokens_no_spec[row]]`) and the tokens the step just
committed (`sampled_token_ids[row]`: the accepted drafts and the target's own token; empty
while the row is still being prefilled). Rows move between steps (finished requests leave
holes that vLLM fills by moving others), requests are preempted and come back later, and
several requests may share a prompt.

So a request is known by its committed tokens: after drafting for a row, its state is filed
under a hash of the tokens it had then; at the next step, the row's tokens minus the ones the
step committed hash to the same key. A request that was away (preempted) is found the same
way; one with a key never seen is new. Two requests with the same committed tokens cannot be
told apart, and need not be: drafts depend on the tokens (and on the shared estimates), never
on which of the two is which, and no draft changes the output.

With `keep_texts` (the suffix cache), each request also keeps its committed tokens, and the
requests that were drafted for at the previous step but are not in this one are `left`
(finished, or preempted: a preempted request that comes back and leaves again is listed
again, with its longer text).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dynaspec.core.round import DraftPlan


@dataclass(frozen=True)
class Sent:
    """What was proposed for a request at one step, kept until the next one judges it."""

    step: int  # the proposer's step count when it was proposed
    tokens: tuple[int, ...]  # the drafted tokens
    plan: DraftPlan  # the plan they came from
    agreement: int = 0  # the copy's agreement (0: nothing copied)
    num_copied: int = 0  # of `tokens`, the first ones copied
    confidences: tuple[float, ...] = ()  # the drafter's probability of each


@dataclass
class Request:
    """One request's state between steps: what the proposer keeps per request (a draft
    model's cache lives in `drafter`)."""

    sent: Sent | None = None  # the last proposal, until the next step judges it
    # dynaspec's Request for it (dynaspec/request.py's drafting_request), made when it is
    # first drafted for: its drafter (a draft model's cache), policy and sampler
    sequence: Any = None
    policy: Any = None  # its policy, made on first use (the adaptive rule's view, or its own)
    steps: int = 0  # steps this request was drafted for
    last_step: int = 0  # the step it was last seen at
    matched_step: int = 0  # the step its row was last matched to it
    text: list[int] = field(default_factory=list)  # its committed tokens (keep_texts only)
    stored: int = 0  # of `text`, the tokens already handed on as `left`


@dataclass(frozen=True)
class Outcome:
    """How the engine judged a request's last proposal at this step."""

    sent: Sent
    num_accepted: int  # drafted tokens kept (a prefix of sent.tokens)
    num_emitted: int  # tokens the step committed for the request (accepted + 1)


@dataclass(frozen=True)
class Row:
    """One row of a step, matched to its request."""

    index: int  # the row in vLLM's input batch
    tokens: np.ndarray  # (n,) the committed tokens (a view into token_ids_cpu)
    request: Request
    new: bool  # first seen at this step (its prefill ran in it)
    outcome: Outcome | None  # None: new, away since its proposal, or nothing was proposed


@dataclass
class RequestTracker:
    """Matches rows to requests by their committed tokens (module docstring)."""

    capacity: int = 4096  # requests kept; the longest unseen are forgotten first
    max_idle_steps: int = 256  # a request unseen for this many steps is forgotten (finished,
    #                            or preempted for long: it then starts afresh, as a new one)
    step: int = 0  # steps seen
    keep_texts: bool = False  # keep each request's committed tokens (for the suffix cache)
    left: list[Request] = field(default_factory=list)  # drafted for last step, absent now
    _waiting: OrderedDict[bytes, list[Request]] = field(default_factory=OrderedDict)
    _filed: list[Request] = field(default_factory=list)  # filed at the current step

    def rows(
        self,
        sampled: Sequence[Sequence[int]],
        num_tokens: np.ndarray,
        token_ids: np.ndarray,
    ) -> list[Row | None]:
        """This step's rows (None where the row committed nothing: it is being prefilled or
        was discarded), each matched to its request."""
        self.step += 1
        found: list[Row | None] = []
        for index, new_tokens in enumerate(sampled):
            if not len(new_tokens):
                found.append(None)
                continue
            tokens = token_ids[index, : int(num_tokens[index])]
            found.append(self._match(index, tokens, list(new_tokens)))
        filed, self._filed = self._filed, []
        self.left = [r for r in filed if r.matched_step != self.step and len(r.text) > r.stored]
        for request in self.left:
            request.stored = len(request.text)
        return found

    def file(self, row: Row, sent: Sent | None) -> None:
        """Files the row's request under its tokens now, with what was proposed for it."""
        row.request.sent = sent
        row.request.steps += 1
        row.request.last_step = self.step
        if self.keep_texts:  # the tokens before are the text kept (the key matched them)
            row.request.text.extend(row.tokens[len(row.request.text) :].tolist())
            self._filed.append(row.request)
        key = _key(row.tokens)
        self._waiting.setdefault(key, []).append(row.request)
        self._waiting.move_to_end(key)
        self._forget()

    def _forget(self) -> None:
        """Forgets the requests filed longest ago while there are too many, or they have
        not been seen for max_idle_steps (the keys are in the order they were filed)."""
        while self._waiting:
            key, requests = next(iter(self._waiting.items()))
            idle = self.step - max(r.last_step for r in requests) > self.max_idle_steps
            if not idle and len(self._waiting) <= self.capacity:
                return
            del self._waiting[key]

    def __len__(self) -> int:
        return sum(len(requests) for requests in self._waiting.values())

    def _match(self, index: int, tokens: np.ndarray, new_tokens: list[int]) -> Row:
        before = tokens[: tokens.size - len(new_tokens)]
        key = _key(before)
        waiting = self._waiting.get(key)
        if not waiting:
            return Row(index, tokens, Request(), new=True, outcome=None)
        request = waiting.pop()
        request.matched_step = self.step
        if not waiting:
            del self._waiting[key]
        return Row(index, tokens, request, new=False, outcome=self._judge(request, new_tokens))

    def _judge(self, request: Request, new_tokens: list[int]) -> Outcome | None:
        """How the engine judged the request's last proposal: None when there was none, when
        the request was away since (preempted: its drafts were dropped), or when what the
        step committed does not start with the drafts it says were accepted."""
        sent = request.sent
        if sent is None or sent.step != self.step - 1:
            return None
        accepted = len(new_tokens) - 1
        if accepted > len(sent.tokens) or tuple(new_tokens[:accepted]) != sent.tokens[:accepted]:
            return None
        return Outcome(sent, accepted, len(new_tokens))


def _key(tokens: np.ndarray) -> bytes:
    """The identity of a request at one step: a digest of its committed tokens."""
    data = np.ascontiguousarray(tokens, dtype=np.int64).tobytes()
    return hashlib.blake2b(data, digest_size=16).digest()
