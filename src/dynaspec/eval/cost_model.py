"""Expected-speedup model: what a decode's rounds cost on this hardware.

Inputs
------
- ``c_d``: the draft's time per drafted token (seconds): a one-token draft forward on a
  cached prefix.
- ``T(n)``: the target's time to verify ``n`` new tokens in one forward on a cached prefix
  (seconds). ``T(1)`` is a plain decoding step of the target alone. Measured for
  n = 1..10 (`measure_costs`); beyond the measured range T is extrapolated linearly from
  its last two points (slope >= 0).
- ``o``: time per round outside the forwards (sampling, verification, bookkeeping);
  0 unless given.
- ``p_t``, ``p_d``: the target's and the draft's prefill time per prompt token (seconds),
  measured on one prompt; 0 (not measured) leaves the prefill out, as older profiles did.
- the rounds of a decode: ``(drafted_i, accepted_i)`` per round i, ``N`` new tokens and
  ``n_0`` prompt tokens.

Formula
-------
::

    predicted time      t   = n_0 * (p_t + [any drafted_i > 0] * p_d)
                              + sum_i ( drafted_i * c_d + T(drafted_i + 1) + o )
    target alone        t_0 = n_0 * p_t + N * ( T(1) + o )
    predicted speedup   S   = t_0 / t

``N`` defaults to ``sum_i (accepted_i + 1)`` (each round commits its accepted draft tokens
plus the target's own). Over several prompts the times add: ``S = sum t_0 / sum t``, the
ratio of the two throughputs.

Both decodes pay the target's prefill; the draft's prefill is paid only by a decode that
drafts at all (a policy that never drafts never runs the draft).

Assumptions: every drafted token costs one draft forward, including the draft's catch-up
forward of two tokens after a fully accepted round (on a CPU a forward over 2 tokens costs
about what one over 1 does) and a catch-up of the few tokens skipped while not drafting
(only the prompt is charged at the prefill rate); costs do not depend on the context length
over the range decoded.

Example: c_d = 0.1 s, T(n) = 1 + 0.1 (n - 1) s, rounds (3, 2), (1, 0), (5, 5):
t = (0.3 + 1.3) + (0.1 + 1.1) + (0.5 + 1.5) = 4.8 s, N = 3 + 1 + 6 = 10, t_0 = 10 s,
S = 10 / 4.8 = 2.083. With a 10-token prompt, p_t = 0.2 s and p_d = 0.05 s:
t = 10 * 0.25 + 4.8 = 7.3 s, t_0 = 10 * 0.2 + 10 = 12 s, S = 12 / 7.3 = 1.644.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dynaspec.backends import as_adapter
from dynaspec.core.timing import device_clock
from dynaspec.errors import ConfigError


@dataclass(frozen=True)
class CostProfile:
    """Measured costs of one pair on one machine (see the module docstring)."""

    draft_token_s: float  # c_d: draft seconds per drafted token
    verify_s: tuple[float, ...]  # verify_s[n - 1] = T(n): target seconds to verify n tokens
    overhead_s: float = 0.0  # o: seconds per round outside the forwards
    target_prefill_token_s: float = 0.0  # p_t: target prefill seconds per prompt token
    draft_prefill_token_s: float = 0.0  # p_d: draft prefill seconds per prompt token

    def __post_init__(self) -> None:
        if not self.verify_s:
            raise ConfigError("a CostProfile needs T(1) at least: verify_s is empty")
        others = (
            self.draft_token_s,
            self.overhead_s,
            self.target_prefill_token_s,
            self.draft_prefill_token_s,
        )
        if min(self.verify_s) <= 0 or min(others) < 0:
            raise ConfigError(
                f"costs must be positive (T) or non-negative (c_d, o, p_t, p_d), got c_d="
                f"{self.draft_token_s}, T={self.verify_s}, o={self.overhead_s}, "
                f"p_t={self.target_prefill_token_s}, p_d={self.draft_prefill_token_s}"
            )

    def verify_time(self, num_tokens: int) -> float:
        """T(num_tokens); linear extrapolation (slope >= 0) past the measured range."""
        if num_tokens < 1:
            raise ConfigError(f"T(n) is defined for n >= 1, got n={num_tokens}")
        measured = len(self.verify_s)
        if num_tokens <= measured:
            return self.verify_s[num_tokens - 1]
        slope = max(self.verify_s[-1] - self.verify_s[-2], 0.0) if measured > 1 else 0.0
        return self.verify_s[-1] + slope * (num_tokens - measured)

    @property
    def step_s(self) -> float:
        """T(1): one decoding step of the target alone."""
        return self.verify_s[0]

    def to_json(self) -> dict[str, Any]:
        return {
            "draft_token_s": self.draft_token_s,
            "verify_s": list(self.verify_s),
            "overhead_s": self.overhead_s,
            "target_prefill_token_s": self.target_prefill_token_s,
            "draft_prefill_token_s": self.draft_prefill_token_s,
            "draft_cost_ratio": self.draft_token_s / self.step_s,  # c_d / T(1)
            "verify_ratio": [t / self.step_s for t in self.verify_s],  # T(n) / T(1)
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CostProfile:
        return cls(
            draft_token_s=float(data["draft_token_s"]),
            verify_s=tuple(float(t) for t in data["verify_s"]),
            overhead_s=float(data.get("overhead_s", 0.0)),
            target_prefill_token_s=float(data.get("target_prefill_token_s", 0.0)),
            draft_prefill_token_s=float(data.get("draft_prefill_token_s", 0.0)),
        )


def predicted_time(
    rounds: Sequence[tuple[int, int]], profile: CostProfile, prompt_tokens: int = 0
) -> float:
    """t = n_0 (p_t + [drafts] p_d) + sum over rounds of drafted c_d + T(drafted + 1) + o."""
    drafts = any(drafted for drafted, _accepted in rounds)
    prefill = profile.target_prefill_token_s + drafts * profile.draft_prefill_token_s
    return prompt_tokens * prefill + sum(
        drafted * profile.draft_token_s + profile.verify_time(drafted + 1) + profile.overhead_s
        for drafted, _accepted in rounds
    )


def baseline_time(new_tokens: int, profile: CostProfile, prompt_tokens: int = 0) -> float:
    """t_0 = n_0 p_t + N (T(1) + o): the target alone decoding the same tokens (seconds)."""
    prefill = prompt_tokens * profile.target_prefill_token_s
    return prefill + new_tokens * (profile.step_s + profile.overhead_s)


def predicted_speedup(
    rounds: Sequence[tuple[int, int]],
    profile: CostProfile,
    new_tokens: int | None = None,
    prompt_tokens: int = 0,
) -> float:
    """S = t_0 / t for one decode; `new_tokens` defaults to sum(accepted + 1)."""
    if new_tokens is None:
        new_tokens = sum(accepted + 1 for _drafted, accepted in rounds)
    time = predicted_time(rounds, profile, prompt_tokens)
    return baseline_time(new_tokens, profile, prompt_tokens) / time if time > 0 else 0.0


def pooled_speedup(
    decodes: Iterable[tuple[Sequence[tuple[int, int]], int, int]], profile: CostProfile
) -> float:
    """S = sum t_0 / sum t over decodes given as (rounds, new_tokens, prompt_tokens)."""
    total_time = 0.0
    total_baseline = 0.0
    for rounds, new_tokens, prompt_tokens in decodes:
        total_time += predicted_time(rounds, profile, prompt_tokens)
        total_baseline += baseline_time(new_tokens, profile, prompt_tokens)
    return total_baseline / total_time if total_time > 0 else 0.0


def measure_costs(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    *,
    max_tokens: int = 10,
    reps: int = 5,
    max_prefill_reps: int = 2,
) -> CostProfile:
    """Measures c_d, T(1..max_tokens), p_t and p_d on the prefix `input_ids` (1, T).

    Each model first caches the prefix; then every timed forward appends tokens and the
    cache is cropped back, so each measurement sees the same context. The n values are
    interleaved within each repetition (a slow moment of a shared machine spreads over all
    n instead of one), one untimed warm-up pass comes first, and each point is the median
    of `reps` repetitions. Last, each model's prefill of the prefix is timed again (the
    first one was the untimed warm-up), at most `max_prefill_reps` times, as p = median
    time / prefix tokens. Every time is read after the model's device has finished
    (`device_clock`), so on a GPU it is the forward's time, not its launch's.
    """
    if max_tokens < 1 or reps < 1:
        raise ConfigError(f"max_tokens and reps must be >= 1, got {max_tokens} and {reps}")
    target_adapter = as_adapter(target)
    draft_adapter = as_adapter(draft)
    with torch.inference_mode():
        first = target_adapter.begin(input_ids)  # (n0,)
        target_adapter.forward(first, 1)
        cached = target_adapter.num_cached
        filler = first[-1:].repeat(max_tokens)  # (max_tokens,) tokens to verify
        samples: dict[int, list[float]] = {n: [] for n in range(1, max_tokens + 1)}
        device = getattr(target_adapter, "device", None)
        for rep in range(reps + 1):
            for n in range(1, max_tokens + 1):
                start = device_clock(device)
                target_adapter.forward(filler[:n], n)
                elapsed = device_clock(device) - start
                target_adapter.crop(cached)
                if rep:  # the first pass warms up
                    samples[n].append(elapsed)
        draft_first = draft_adapter.begin(input_ids)
        draft_adapter.forward(draft_first, 1)
        draft_cached = draft_adapter.num_cached
        draft_samples = []
        draft_device = getattr(draft_adapter, "device", None)
        for rep in range(reps + 1):
            start = device_clock(draft_device)
            draft_adapter.forward(filler[:1], 1)
            elapsed = device_clock(draft_device) - start
            draft_adapter.crop(draft_cached)
            if rep:
                draft_samples.append(elapsed)
        prefill_reps = max(1, min(reps, max_prefill_reps))
        target_prefill = _prefill_time(target_adapter, first, prefill_reps) / first.numel()
        draft_prefill = _prefill_time(draft_adapter, draft_first, prefill_reps)
        draft_prefill /= draft_first.numel()
    return CostProfile(
        draft_token_s=statistics.median(draft_samples),
        verify_s=tuple(statistics.median(samples[n]) for n in range(1, max_tokens + 1)),
        target_prefill_token_s=target_prefill,
        draft_prefill_token_s=draft_prefill,
    )


def _prefill_time(adapter: Any, first: torch.Tensor, reps: int) -> float:
    """Median seconds of a forward over `first` on an empty cache; leaves the cache empty."""
    samples = []
    device = getattr(adapter, "device", None)
    for _ in range(reps):
        adapter.crop(0)
        start = device_clock(device)
        adapter.forward(first, 1)
        samples.append(device_clock(device) - start)
    adapter.crop(0)
    return statistics.median(samples)
