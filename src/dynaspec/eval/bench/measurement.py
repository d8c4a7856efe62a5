"""What one method measures on one prompt (the timing and decoding facts of a record)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    """The measurements of one generation. Lists are tuples here, lists in the JSON."""

    family: str  # "dynaspec" | "hf" | "fast" | "llamacpp" | "openvino"
    new_tokens: int
    wall_time_s: float  # one clock around the whole call
    tokens_per_s: float | None
    rounds: int | None  # None: not known (another engine's drafting, timed from outside)
    mean_accepted_per_round: float | None
    acceptance_rate: float | None
    draft_forwards: int | None  # None: not known, as rounds
    target_forwards: int | None
    draft_time_s: float | None  # the loop's own split (dynaspec and fast only)
    target_time_s: float | None
    other_time_s: float | None
    inner_wall_time_s: float
    stop_reasons: Mapping[str, int] | None  # per-round stop reason -> rounds (dynaspec, fast)
    accepted_per_round: tuple[int, ...]
    drafted_per_round: tuple[int, ...]
    # Present in some families only (None: absent from the record).
    copied_per_round: tuple[int, ...] | None = None  # dynaspec, fast
    processors: tuple[str, ...] | None = None  # dynaspec, fast
    compile_time_s: float | None = None  # fast
    weight_bytes: int | None = None  # fast
    fast_models: tuple[str, ...] | None = None  # fast
    gguf: str | None = None  # llamacpp
    openvino_ir: str | None = None  # openvino: the IR folder(s) it ran, draft after target


# The fields some families have: None is left out of the JSON (never written as null).
OPTIONAL_FIELDS: tuple[str, ...] = (
    "copied_per_round",
    "processors",
    "compile_time_s",
    "weight_bytes",
    "fast_models",
    "gguf",
    "openvino_ir",
)


@dataclass(frozen=True)
class MethodOutput:
    """What running a method returns: its measurements and its new tokens."""

    measurement: Measurement
    output_ids: tuple[int, ...]


def rate(tokens: int, wall: float) -> float | None:
    """Tokens per second, None for a zero wall time."""
    return tokens / wall if wall > 0 else None


def speedup(this: Measurement, target: Measurement) -> float | None:
    """Tokens per second against the target alone's: the ratio of the wall times where both
    made as many tokens (every method that gives the target's output), and where a model of
    another precision or another engine stops at an EOS sooner or later than the target, its
    rate over the tokens it made (a time ratio would credit the shorter text). Where neither
    made a token, the ratio of the times; where only the target did, 0. None without a time,
    or where only this did (the target has no rate to compare)."""
    if not this.wall_time_s or not target.wall_time_s:
        return None
    if bool(this.new_tokens) != bool(target.new_tokens):
        return 0.0 if target.new_tokens else None
    ratio = target.wall_time_s / this.wall_time_s
    if this.new_tokens:  # as long: times 1.0, the time ratio exactly
        ratio *= this.new_tokens / target.new_tokens
    return ratio
