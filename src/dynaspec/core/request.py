"""One request: everything one sequence is decoded with, validated and built in one place.

A `Request` is made by `dynaspec.request.make_request` for every entry point alike: a
sequence alone (`generate`), each row of a batch (`batch.py`), each row that joins a running
batch (`continuous.py`, and so the server), and each request a vLLM proposer drafts for. The
loops read it and nothing else of the call: the single loop its prompt, limits, sampler,
stopping, drafter and policy; the batch loop a `Row` made from it (`row`, with its policy),
the batch's forwards and drafter being shared by its rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dynaspec.core.config import LimitsConfig
from dynaspec.core.emission import Emission
from dynaspec.core.protocols import Drafter, LookaheadPolicy
from dynaspec.core.row import Row
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.stats import GenerationStats


@dataclass(frozen=True)
class Request:
    """One sequence's validated prompt and what decodes it (module docstring)."""

    prompt: torch.Tensor  # (1, T) token ids on the target's device; a batch row's left-padded
    pads: int  # the prompt's left padding (a batch row; 0 for a sequence alone)
    limits: LimitsConfig  # its max_new_tokens, EOS ids, max_time and stop strings
    sampler: TokenSampler  # its processors and warpers in transformers' order, its seed
    criteria: tuple[Any, ...]  # stopping criteria checked per emitted token (max_time, stop
    #                            strings, the caller's); EOS and the length are the loop's own
    emission: Emission | None  # those criteria and the score/logit rows to return (None:
    #                            neither, the fast path)
    processor_names: tuple[str, ...]  # the processors' and criteria's short names, for stats
    drafter: Drafter | None = None  # its draft source alone (None: the target alone, or a
    #                                 batch row, whose batch drafts for all rows)
    policy: LookaheadPolicy | None = None  # how far it drafts, alone or as a batch row
    #                                        (None: a batch row its batch's rule plans)
    streamer: Any = None  # receives its tokens as they are committed (put / end)

    @property
    def do_sample(self) -> bool:
        """Whether its tokens are sampled (else the argmax of the processed scores)."""
        return bool(self.sampler.config.do_sample)

    def row(self) -> Row:
        """A batch row for it: room for the prompt and its new tokens, its own stats."""
        width = self.prompt.shape[1]
        return Row(
            tokens=self.prompt.new_empty(width + self.limits.max_new_tokens),
            pads=self.pads,
            sampler=self.sampler,
            emission=self.emission,
            limits=self.limits,
            stats=GenerationStats(prompt_tokens=width),
            streamer=self.streamer,
            policy=self.policy,
        )
