"""One `dynaspec bench` record per (prompt, method), and its JSON line in results.jsonl.

The JSON is the same as the untyped records the bench wrote before this module: the same
keys in the same order, lists as lists, the mismatch as a dict and the run's provenance
under "run". Records written before a field existed still load (see `from_json`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from dynaspec.eval.bench.measurement import OPTIONAL_FIELDS, Measurement
from dynaspec.mismatch import Divergence

_LISTS = (
    "accepted_per_round",
    "drafted_per_round",
    "copied_per_round",
    "processors",
    "fast_models",
    "wall_times_s",
)


@dataclass(frozen=True)
class BenchRecord:
    """One method on one prompt: where it ran, what it measured, how its output compared."""

    task: str  # a table row
    prompt_id: str  # unique within its task
    prompt_index: int  # the prompt's place in the run
    prompt_tokens: int
    method: str
    order_in_prompt: int  # its place in the prompt's rotated run order
    load_avg_1m: float | None  # the 1-minute load average before the call
    measurement: Measurement
    speedup_vs_target: float | None  # tokens/s(this) / tokens/s(target alone), this prompt
    matches_target: bool | None  # None: not compared (a differently quantized model)
    mismatch: Divergence | None  # where and why it differs from its reference
    output_sha: str  # short sha256 of the new tokens
    # reference_method and same_as_target: absent (None) in records written before them.
    reference_method: str | None = None  # the method whose output it must equal
    same_as_target: bool | None = None  # output == the target alone's
    output_ids: tuple[int, ...] | None = None  # kept for the baseline and mismatches
    wall_times_s: tuple[float, ...] | None = None  # every run's, in run order (--repeat N > 1)
    run: Mapping[str, Any] = field(default_factory=dict)  # the run's provenance

    def to_json(self) -> dict[str, Any]:
        """The record as results.jsonl holds it (key order included)."""
        m = self.measurement
        data: dict[str, Any] = {
            "task": self.task,
            "prompt_id": self.prompt_id,
            "prompt_index": self.prompt_index,
            "prompt_tokens": self.prompt_tokens,
            "method": self.method,
            "family": m.family,
            "order_in_prompt": self.order_in_prompt,
            "load_avg_1m": self.load_avg_1m,
            "new_tokens": m.new_tokens,
            "wall_time_s": m.wall_time_s,
            "tokens_per_s": m.tokens_per_s,
            "speedup_vs_target": self.speedup_vs_target,
            "matches_target": self.matches_target,
            "mismatch": asdict(self.mismatch) if self.mismatch else None,
        }
        skipped = {"family", "new_tokens", "wall_time_s", "tokens_per_s", *OPTIONAL_FIELDS}
        data.update((f.name, getattr(m, f.name)) for f in fields(m) if f.name not in skipped)
        data.update((k, getattr(m, k)) for k in OPTIONAL_FIELDS if getattr(m, k) is not None)
        if self.same_as_target is not None:
            data["reference_method"] = self.reference_method
            data["same_as_target"] = self.same_as_target
        if self.wall_times_s is not None:
            data["wall_times_s"] = self.wall_times_s
        data["output_sha"] = self.output_sha
        if self.output_ids is not None:
            data["output_ids"] = self.output_ids
        data["run"] = self.run
        return {k: list(v) if isinstance(v, tuple) else v for k, v in data.items()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchRecord:
        """A record from its JSON (older records: the fields they lack are None)."""
        values = {k: tuple(v) if k in _LISTS and v is not None else v for k, v in data.items()}
        names = {f.name for f in fields(Measurement)}
        measurement = Measurement(**{k: v for k, v in values.items() if k in names})
        own = {f.name for f in fields(cls)} - {"measurement", "mismatch", "output_ids"}
        mismatch = data.get("mismatch")
        output_ids = data.get("output_ids")
        return cls(
            measurement=measurement,
            mismatch=Divergence(**mismatch) if mismatch else None,
            output_ids=tuple(output_ids) if output_ids is not None else None,
            **{k: v for k, v in values.items() if k in own},
        )


def load_records(jsonl_path: str | os.PathLike[str]) -> list[BenchRecord]:
    """The records of a results.jsonl (blank lines skipped)."""
    with open(jsonl_path, encoding="utf-8") as file:
        return [BenchRecord.from_json(json.loads(line)) for line in file if line.strip()]
