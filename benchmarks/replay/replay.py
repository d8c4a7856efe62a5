"""A target that replays its own recorded output, on a virtual clock.

dynaspec's real loop, drafters and adaptive policy run against `Replay`, a ModelAdapter whose
logits at every position are a one-hot row of the token the bf16 target chose there in a
recorded bench run (the `target` rows in targets.jsonl). A target forward over n
tokens takes no real time: it moves the clock the loop, the drafters and the policy read
(`clock`) by STEP + TOKEN * n seconds, the line an earlier session fitted to measured
forwards of the bf16 Qwen2.5-Coder-1.5B on the 2-core AVX512-BF16 EPYC
(../prefill-rows-avx512-2026-12-06/offline/sim.py). A real draft model, when one runs, takes
its real time. So a policy is judged on a fixed text, with the target's cost exactly the same
in every run, and a prompt costs seconds instead of a minute.

transformers' prompt lookup (10) is priced on the same line by `hf_pl`: its candidates are
dynaspec's "leftmost" match (tested equal to transformers', drafters/prompt_lookup.py), no
overhead of its own.
"""

import json
import time
from pathlib import Path

import torch

from dynaspec.core import loop as core_loop
from dynaspec.drafters import draft_model, prompt_lookup
from dynaspec.drafters.prompt_lookup import LookupConfig, find_match
from dynaspec.eval.data import load_prompts
from dynaspec.prompts import render_prompt

STEP_S, TOKEN_S = 0.165, 0.0077  # a target forward over n tokens: STEP_S + TOKEN_S * n
_extra = [0.0]  # virtual seconds added by target forwards
_real = time.perf_counter


def clock(*_device) -> float:
    return _real() + _extra[0]


# every clock the round reads: the loop's, the draft model's, prompt lookup's
core_loop.perf_counter = core_loop.device_clock = clock
draft_model.device_clock = clock
prompt_lookup.perf_counter = clock


def forward_s(num_tokens: int) -> float:
    return STEP_S + TOKEN_S * num_tokens


class Replay:
    """The target, replaying `sequence` (prompt + recorded output)."""

    is_encoder_decoder = False
    max_length = None

    def __init__(self, sequence: torch.Tensor, vocab_size: int, eos: int) -> None:
        self.sequence, self.vocab_size, self.eos = sequence.tolist(), vocab_size, eos
        self.num_cached = self.forwards = 0

    def begin(self, input_ids, max_length=None):
        self.num_cached = 0
        return input_ids[0]

    def forward(self, new_tokens, num_logits):
        started = _real()
        first = self.num_cached
        self.num_cached += new_tokens.numel()
        self.forwards += 1
        logits = torch.zeros(num_logits, self.vocab_size)
        for row in range(num_logits):
            after = self.num_cached - num_logits + row + 1  # the position this row predicts
            assert after > first
            token = self.sequence[after] if after < len(self.sequence) else self.eos
            logits[row, token] = 1.0
        _extra[0] += forward_s(new_tokens.numel()) - (_real() - started)
        return logits

    def crop(self, num_tokens):
        self.num_cached = num_tokens


def hf_prompt_lookup_s(tokens: torch.Tensor, start: int, eos: torch.Tensor, cap: int = 10):
    """transformers' prompt lookup (cap) over tokens[start:] on the line: (seconds after the
    prompt's forward, forwards)."""
    end, seconds, forwards = start, 0.0, 0
    while end < tokens.numel():
        match = find_match(tokens[:end], LookupConfig(cap, 2, "leftmost"), eos)
        kept, fed = 0, 1
        if match is not None:
            copy = match.continuation.tolist()
            fed += len(copy)
            while (
                kept < len(copy)
                and end + kept < tokens.numel()
                and copy[kept] == tokens[end + kept]
            ):
                kept += 1
        seconds += forward_s(fed)
        forwards += 1
        end += kept + 1
    return seconds, forwards


def recorded(tokenizer, task: str, prefix: str = ""):
    """(seed, prompt id, prompt ids (n,), the target's recorded output (m,)) of every prompt of
    `task` whose id starts with `prefix`, once. targets.jsonl holds the `target` rows of the
    bench runs this replay was built on (their folders: benchmarks/HISTORY.md), one line a
    (task, seed, prompt): the first run, in folder order, that recorded it."""
    prompts: dict[int, dict] = {}
    for line in (Path(__file__).with_name("targets.jsonl")).open():
        record = json.loads(line)
        seed, key = record["seed"], record["prompt_id"]
        if record["task"] != task or not key.startswith(prefix):
            continue
        if seed not in prompts:
            prompts[seed] = {p.id: p for p in load_prompts(task, 4, seed)}
        if key in prompts[seed]:
            ids = render_prompt(tokenizer, prompts[seed][key].text, chat=True)[0]
            yield seed, key, ids, torch.tensor(record["output_ids"])
