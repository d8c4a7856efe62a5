"""Per-round overhead: a round's wall time minus its model forwards, dynaspec vs transformers.

Both decode with the target as its own draft (a second module with the same weights, so each
forward is known to be the target's or the draft's) and the constant schedule, so every
drafted token is accepted (up to bf16 ties between a one-token and a multi-token forward) and
both run the same rounds: k draft forwards and one target forward over k + 1 tokens.

Every forward of either module is timed by a pre- and a post-hook that wait for the device
(`device_clock`), the hooks being registered for the call and removed after it, like
`HFPeer`'s. What is left of the call's wall time is everything else: sampling, verification,
cache bookkeeping, policy, Python. A call also pays a fixed set-up (transformers validates its
generation config, builds processors, ...), so each method decodes two lengths and the
per-round overhead is the slope ``(X_long - X_short) / (R_long - R_short)``, X being the
non-forward time and R the rounds; the set-up is the intercept. The same for the target alone
(no draft: one round per token). The hooks' waits stop the host from queueing a forward while
the device still runs the previous one, so the overhead is the host's own time per round; one
more long call without hooks gives the wall time per token a user sees.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch

from dynaspec.core.timing import device_clock
from dynaspec.eval.hf_peer import HFAssistConfig, HFPeer
from dynaspec.generation import generate


@dataclass(frozen=True)
class RunTiming:
    """One generate() call with every forward timed."""

    wall_s: float  # the whole call, the device finished at both ends
    forward_s: float  # inside model forwards (target and draft)
    target_forwards: int  # one per round
    draft_forwards: int  # assistant / draft forward calls
    new_tokens: int  # tokens generated
    drafted: int  # draft tokens proposed over the call
    accepted: int  # of those, accepted

    @property
    def other_s(self) -> float:
        return self.wall_s - self.forward_s


class _ForwardTimer:
    """Hooks on a module that add each forward's synchronised wall time to `total_s`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.total_s = 0.0
        self.calls = 0
        self._start = 0.0

    def before(self, *_: Any) -> None:
        self._start = device_clock(self.device)

    def after(self, *_: Any) -> None:
        self.total_s += device_clock(self.device) - self._start
        self.calls += 1


@contextmanager
def timed_forwards(*models: Any, hooked: bool = True) -> Iterator[list[_ForwardTimer]]:
    """One `_ForwardTimer` per model, hooked for the duration of the block (if `hooked`)."""
    timers = [_ForwardTimer(next(model.parameters()).device) for model in models]
    handles = []
    try:
        for model, timer in zip(models, timers, strict=True):
            if hooked:
                handles.append(model.register_forward_pre_hook(timer.before))
                handles.append(model.register_forward_hook(timer.after))
        yield timers
    finally:
        for handle in handles:
            handle.remove()


def _timed(
    call: Callable[[], Any], target: Any, draft: Any | None, hooked: bool
) -> tuple[Any, RunTiming]:
    """Runs `call`, with both models' forwards timed if `hooked` (else forward_s and the
    forward counts are 0); the other counts are filled by the caller."""
    device = next(target.parameters()).device
    models = (target,) if draft is None else (target, draft)
    with timed_forwards(*models, hooked=hooked) as timers, torch.inference_mode():
        start = device_clock(device)
        result = call()
        wall = device_clock(device) - start
    timing = RunTiming(
        wall_s=wall,
        forward_s=sum(timer.total_s for timer in timers),
        target_forwards=timers[0].calls,
        draft_forwards=timers[1].calls if draft is not None else 0,
        new_tokens=0,
        drafted=0,
        accepted=0,
    )
    return result, timing


def dynaspec_run(
    target: Any,
    draft: Any | None,
    prompt: torch.Tensor,
    new_tokens: int,
    lookahead: int,
    hooked: bool = True,
) -> RunTiming:
    """dynaspec.generate with the constant schedule (`draft` None: the target alone)."""

    def call() -> Any:
        return generate(
            target,
            draft,
            prompt,
            max_new_tokens=new_tokens,
            num_assistant_tokens=lookahead,
            num_assistant_tokens_schedule="constant",
            eos_token_id=[],
        )

    out, timing = _timed(call, target, draft, hooked)
    rounds = out.stats.rounds
    return _counted(
        timing,
        out.sequences.shape[1] - prompt.shape[1],
        sum(record.num_drafted for record in rounds),
        sum(record.num_accepted for record in rounds),
    )


def transformers_run(
    peer: HFPeer, prompt: torch.Tensor, new_tokens: int, lookahead: int, hooked: bool = True
) -> RunTiming:
    """transformers' generate(): assisted with a constant `lookahead` and no confidence stop
    when the peer has a draft, plain greedy otherwise."""
    assist = HFAssistConfig(lookahead, "constant", 0.0) if peer.draft is not None else None
    prompt = prompt.to(next(peer.target.parameters()).device)  # generate() does not move it

    def call() -> Any:
        return peer.generate(
            prompt, max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0, assist=assist
        )

    result, timing = _timed(call, peer.target, peer.draft, hooked)
    return _counted(
        timing,
        result.sequences.shape[1] - prompt.shape[1],
        sum(result.drafted_per_round),
        sum(result.accepted_per_round),
    )


def _counted(timing: RunTiming, new_tokens: int, drafted: int, accepted: int) -> RunTiming:
    values = asdict(timing) | {"new_tokens": new_tokens, "drafted": drafted, "accepted": accepted}
    return RunTiming(**values)


@dataclass(frozen=True)
class OverheadResult:
    """Per-round overhead of one method, from short and long calls (see the module doc)."""

    per_round_s: float  # median over repetitions of the slope of non-forward time per round
    setup_s: float  # the intercept: non-forward time of a call that runs no round
    forward_per_round_s: float  # forward time per round in the long calls
    rounds_per_call: float  # rounds of a long call (median)
    wall_per_token_s: float  # a long call without the timing hooks: wall time / new tokens
    acceptance: float | None  # accepted / drafted over the long calls (None: no draft)
    runs: list[dict[str, Any]]  # every timed call, for the record

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def overhead(
    run: Callable[[int, bool], RunTiming], short_tokens: int, long_tokens: int, reps: int
) -> OverheadResult:
    """`run(new_tokens, hooked)`: a warm-up, `reps` hooked calls of each length (the slope per
    round), one long call without hooks (the wall time per token)."""
    run(short_tokens, False)  # warm-up
    slopes, intercepts, longs, runs = [], [], [], []
    for _ in range(reps):
        short, long = run(short_tokens, True), run(long_tokens, True)
        runs += [asdict(short), asdict(long)]
        rounds = long.target_forwards - short.target_forwards
        slope = (long.other_s - short.other_s) / rounds if rounds > 0 else long.other_s
        slopes.append(slope)
        intercepts.append(short.other_s - slope * short.target_forwards)
        longs.append(long)
    plain = run(long_tokens, False)
    runs.append(asdict(plain))
    drafted = sum(long.drafted for long in longs)
    return OverheadResult(
        per_round_s=statistics.median(slopes),
        setup_s=statistics.median(intercepts),
        forward_per_round_s=statistics.median(x.forward_s / x.target_forwards for x in longs),
        rounds_per_call=statistics.median(x.target_forwards for x in longs),
        wall_per_token_s=plain.wall_s / plain.new_tokens,
        acceptance=sum(long.accepted for long in longs) / drafted if drafted else None,
        runs=runs,
    )
