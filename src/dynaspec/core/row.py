"""One sequence's committed tokens and what is its own (its sampler, limits, stop rules,
stats, streamer, policy, drafter), and the commit both loops share: the single loop
(core/loop.py) keeps one `Row`, the batch loop (core/batch_loop.py) one per row of the
batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from dynaspec.core.config import LimitsConfig
from dynaspec.core.emission import Emission
from dynaspec.core.protocols import Drafter, LookaheadPolicy
from dynaspec.core.round import Round
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.stats import GenerationStats


@dataclass
class Row:
    """A sequence for the whole call: its tokens and everything that is its own."""

    tokens: torch.Tensor  # (T + max_new,) left padding, prompt, then new tokens
    pads: int  # left padding at the start (a batch's; 0 alone)
    sampler: TokenSampler
    emission: Emission | None  # stopping criteria, scores/logits to return (None: neither)
    limits: LimitsConfig  # the row's own: its max_new_tokens and EOS ids
    start: int = 0  # where its new tokens begin: T, the (padded) prompt's width
    length: int = 0  # tokens committed so far
    done: bool = False
    stats: GenerationStats = field(default_factory=GenerationStats)
    # transformers' streamer protocol (put(tokens (1, n)), end()), as generate(streamer=):
    # the prompt (without left padding), each round's new tokens, end() at the end
    streamer: Any = None
    eos: torch.Tensor | None = None  # (e,) its EOS ids on the tokens' device, from `begin`
    # how far it drafts, planned as alone (a batch row's where no batch rule plans the rows
    # together: core/batch_loop.py)
    policy: LookaheadPolicy | None = None
    # its draft source, fed its tokens without the left padding as alone (a batch row's where
    # no batch drafter drafts for the rows together: core/batch_loop.py)
    drafter: Drafter | None = None

    @property
    def committed(self) -> torch.Tensor:
        return self.tokens[: self.length]

    @property
    def room(self) -> int:
        """The most tokens the row may still emit."""
        return self.limits.max_new_tokens - (self.length - self.start)

    def begin(self, prompt: torch.Tensor) -> None:
        """Commits the (padded) prompt (T,), or an encoder-decoder's start token: nothing
        new yet; the streamer gets it first, as transformers' streamers expect."""
        self.tokens[: prompt.numel()] = prompt
        self.start = self.length = prompt.numel()
        device = self.tokens.device
        self.eos = torch.tensor(self.limits.eos_token_ids, dtype=torch.long, device=device)
        if self.streamer is not None:
            self.streamer.put(prompt[None, self.pads :].cpu())

    def commit(self, new_tokens: torch.Tensor, scores: Any, logits: Any) -> torch.Tensor:
        """Appends a round's `new_tokens` (accepted + the target's), cut at the row's room,
        its first EOS and the first token where a stopping criterion triggers (checked
        token by token, with the round's processed `scores` and raw `logits`, (k + 1, V));
        returns the tokens committed."""
        assert self.eos is not None, "begin() first"
        new_tokens, done = cut(new_tokens, self.room, self.eos)
        if self.emission is not None:
            new_tokens, stopped = self.emission.emit(self.committed, new_tokens, scores, logits)
            done = done or stopped
        self.tokens[self.length : self.length + new_tokens.numel()] = new_tokens
        self.length += new_tokens.numel()
        self.done = done
        return new_tokens

    def record(self, round: Round, new_tokens: torch.Tensor) -> None:
        """Keeps the round's record and streams its tokens (and the end, once done)."""
        self.stats.rounds.append(round)
        if self.streamer is not None:
            self.streamer.put(new_tokens[None].cpu())
            if self.done:
                self.streamer.end()


def cut(new_tokens: torch.Tensor, room: int, eos: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Keeps at most `room` tokens and nothing after the first EOS; returns (tokens, done)."""
    new_tokens = new_tokens[:room]
    done = new_tokens.numel() >= room
    if eos.numel():
        hits = torch.isin(new_tokens, eos).nonzero()
        if hits.numel():
            new_tokens = new_tokens[: int(hits[0, 0]) + 1]
            done = True
    return new_tokens, done
