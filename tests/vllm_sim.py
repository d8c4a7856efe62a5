"""A small simulation of how vLLM's V1 engine drives a custom proposer, for the contract
tests of dynaspec's vLLM proposers (test_vllm_plugin.py), without vLLM.

What it copies from vLLM (gpu_model_runner.py, the ngram proposer's arguments): one call of
`propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)` per step, after the step's
tokens are written into the row's `token_ids_cpu` and counted in `num_tokens_no_spec`; a row
per running request in the input batch, an empty list for a row still being prefilled
(chunked prefill); greedy verification of the drafts as point masses (the accepted prefix and
the target's own token); finished requests leave holes that the last row moves into (the
batch's `condense`); preempted requests leave the batch, their drafts dropped, and come back
later with their tokens prefilled again. It adds chaos vLLM can also produce: rows swapped
between steps, drafts cut by the step's token budget.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class SimRequest:
    prompt: list[int]
    max_tokens: int
    out: list[int] = field(default_factory=list)
    drafts: list[int] = field(default_factory=list)  # scheduled for the next step
    prefill_chunks: int = 1  # steps its (re)prefill takes
    prefilling: int = 0  # prefill steps left (> 0: being prefilled)
    drafted: int = 0  # drafts verified (the truth the proposer's counts are checked against)
    accepted: int = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.out

    @property
    def done(self) -> bool:
        return len(self.out) >= self.max_tokens


@dataclass
class Chaos:
    swap: float = 0.0  # chance per step that two rows swap places
    preempt: float = 0.0  # chance per step that a running request is preempted
    cut: float = 0.0  # chance per row that the step's budget cuts its drafts
    away_steps: int = 2  # steps a preempted request waits before it comes back


class SimEngine:
    """Runs requests to the end under a proposer; `target(tokens)` is the greedy token."""

    def __init__(
        self,
        proposer,
        target: Callable[[list[int]], int],
        *,
        max_num_seqs: int = 4,
        max_model_len: int = 256,
        k: int = 5,
        chaos: Chaos | None = None,
        seed: int = 0,
        step_cost: Callable[[int], float] | None = None,
        clock: list[float] | None = None,
    ) -> None:
        self.proposer = proposer
        self.target = target
        self.k = k
        self.chaos = chaos or Chaos()
        self.rng = random.Random(seed)
        self.max_num_seqs = max_num_seqs
        self.token_ids = np.zeros((max_num_seqs, max_model_len), dtype=np.int32)
        self.num_tokens = np.zeros(max_num_seqs, dtype=np.int32)
        self.rows: list[SimRequest] = []  # the input batch, in row order
        self.waiting: list[tuple[int, SimRequest]] = []  # (step it may start, request)
        self.finished: list[SimRequest] = []
        self.steps = 0
        self.step_cost = step_cost  # seconds of a forward over N tokens (a fake clock)
        self.clock = clock  # [now]: advanced by step_cost(N) each step
        self.proposals: list[list[list[int]]] = []  # what propose() returned, per step

    def add(self, prompt: list[int], max_tokens: int, prefill_chunks: int = 1) -> SimRequest:
        request = SimRequest(list(prompt), max_tokens, prefill_chunks=prefill_chunks)
        self.waiting.append((0, request))
        return request

    def run(self, max_steps: int = 10_000) -> list[SimRequest]:
        while (self.rows or self.waiting) and self.steps < max_steps:
            self.step()
        return self.finished

    def step(self) -> None:
        self.steps += 1
        self._admit()
        if self.rows and self.rng.random() < self.chaos.swap:
            i, j = self.rng.randrange(len(self.rows)), self.rng.randrange(len(self.rows))
            self._swap(i, j)
        tokens_in_step = 0
        sampled: list[list[int]] = []
        for index, request in enumerate(self.rows):
            new, verified = self._forward(request)
            tokens_in_step += verified
            sampled.append(new)
            self._write(index, request)
        if self.clock is not None and self.step_cost is not None:
            self.clock[0] += self.step_cost(tokens_in_step)
        drafts = self.proposer.propose(sampled, self.num_tokens, self.token_ids)
        assert len(drafts) == len(self.rows)
        self.proposals.append(drafts)
        for request, draft, new in zip(self.rows, drafts, sampled, strict=True):
            assert len(draft) <= self.k, "a proposal longer than num_speculative_tokens"
            assert not (draft and not new), "a proposal for a row that committed nothing"
            if draft and self.rng.random() < self.chaos.cut:
                draft = draft[: self.rng.randrange(len(draft))]
            request.drafts = [int(t) for t in draft]
        self._finish()
        self._preempt()

    # ---- one row ------------------------------------------------------------------------
    def _forward(self, request: SimRequest) -> tuple[list[int], int]:
        """The tokens the step commits for the row, and how many tokens it verified."""
        if request.prefilling:
            request.prefilling -= 1
            if request.prefilling:
                return [], 0  # a prompt chunk: nothing sampled yet
            new = [self.target(request.tokens)]
            request.out.extend(new)
            return new, len(request.tokens)
        drafts, new = request.drafts, []
        for token in drafts:
            want = self.target(request.tokens + new)
            if token != want:
                break
            new.append(token)
        request.drafted += len(drafts)
        request.accepted += len(new)
        new.append(self.target(request.tokens + new))
        request.out.extend(new)
        request.drafts = []
        return new, len(drafts) + 1

    def _write(self, index: int, request: SimRequest) -> None:
        tokens = request.tokens
        self.token_ids[index, : len(tokens)] = tokens
        self.num_tokens[index] = len(tokens)

    # ---- the batch -------------------------------------------------------------------------
    def _admit(self) -> None:
        ready = [(s, r) for s, r in self.waiting if s <= self.steps]
        for item in ready:
            if len(self.rows) >= self.max_num_seqs:
                break
            self.waiting.remove(item)
            request = item[1]
            request.prefilling = request.prefill_chunks
            request.drafts = []
            self.rows.append(request)

    def _finish(self) -> None:
        index = 0
        while index < len(self.rows):
            if self.rows[index].done:
                self.finished.append(self.rows[index])
                self._remove(index)
            else:
                index += 1

    def _preempt(self) -> None:
        running = [i for i, r in enumerate(self.rows) if not r.prefilling]
        if running and self.rng.random() < self.chaos.preempt:
            index = self.rng.choice(running)
            request = self.rows[index]
            request.drafts = []  # its drafts are dropped
            self._remove(index)
            self.waiting.append((self.steps + self.chaos.away_steps, request))

    def _remove(self, index: int) -> None:
        """As vLLM's condense: the last row moves into the hole."""
        last = len(self.rows) - 1
        if index != last:
            self._swap(index, last)
        self.rows.pop()

    def _swap(self, i: int, j: int) -> None:
        self.rows[i], self.rows[j] = self.rows[j], self.rows[i]
        self.token_ids[[i, j]] = self.token_ids[[j, i]]
        self.num_tokens[[i, j]] = self.num_tokens[[j, i]]


def alone(target: Callable[[list[int]], int], prompt: list[int], max_tokens: int) -> list[int]:
    """The target's greedy output without speculation."""
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(target(tokens))
    return tokens[len(prompt) :]


def looping_target(vocab: int = 12, flip_every: int = 7) -> Callable[[list[int]], int]:
    """A deterministic greedy 'model' whose text repeats (so prompt lookup matches) but not
    always (so copies are sometimes rejected): the next token follows the last three, except
    at positions that are multiples of `flip_every`."""

    def target(tokens: list[int]) -> int:
        last = tuple(tokens[-3:])
        value = (sum((i + 1) * t for i, t in enumerate(last)) * 7 + 3) % vocab
        if len(tokens) % flip_every == 0:
            value = (value + len(tokens)) % vocab
        return value

    return target
