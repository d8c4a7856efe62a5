"""One method's record on one prompt, from its timed runs (`dynaspec bench`, `--repeat N`):
the run with the median wall time, every run's output compared with its reference's, and a
mismatch classified and reported as it is found."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dynaspec.eval.bench.measurement import MethodOutput, speedup
from dynaspec.eval.bench.methods import BASELINE, PEER_FAMILIES, SPECS
from dynaspec.eval.bench.record import BenchRecord
from dynaspec.eval.bench.records import BenchConfig, BenchPrompt, output_digest
from dynaspec.mismatch import Divergence, classify_mismatch, model_dtype


@dataclass(frozen=True)
class Measured:
    """A method's output on the current prompt, and where it ran in the prompt's order."""

    output: MethodOutput
    order_in_prompt: int
    load_avg_1m: float | None


def prompt_record(
    target: Any,
    prompt: BenchPrompt,
    index: int,
    name: str,
    runs: dict[str, list[Measured]],
    config: BenchConfig,
) -> BenchRecord:
    """The record of `name` on `prompt`: its median run (`median_run`), every run's output
    compared with its reference's (the target alone's, or a fast method's own target
    alone's) by the reference's `target`; the mismatch is the median run's, else the first
    other run's that differs."""
    measured = median_run(runs[name])
    output = list(measured.output.output_ids)
    reference_method = SPECS[name].reference
    baseline_run = median_run(runs[BASELINE])
    baseline = list(baseline_run.output.output_ids)
    reference_run = median_run(runs[reference_method]) if reference_method else baseline_run
    reference = list(reference_run.output.output_ids)
    peer = SPECS[name].family in PEER_FAMILIES  # another engine: compared, not classified
    others = [list(run.output.output_ids) for run in runs[name] if run is not measured]
    differing = [ids for ids in (output, *others) if ids != reference]  # the median run's first
    divergence = None
    if differing and reference_method is not None and not peer:
        dtype = str(model_dtype(target)).removeprefix("torch.")
        divergence = classify_mismatch(
            target, prompt.input_ids, reference, differing[0], config.tie_steps, dtype
        )
        warn_mismatch(prompt, name, divergence)
    measurement = measured.output.measurement
    walls = tuple(run.output.measurement.wall_time_s for run in runs[name])
    return BenchRecord(
        task=prompt.task,
        prompt_id=prompt.id,
        prompt_index=index,
        prompt_tokens=int(prompt.input_ids.shape[1]),
        method=name,
        order_in_prompt=measured.order_in_prompt,
        load_avg_1m=measured.load_avg_1m,
        measurement=measurement,
        speedup_vs_target=speedup(measurement, baseline_run.output.measurement),
        # None: not compared (a differently quantized model); same_as_target says if it agreed.
        matches_target=(
            (not differing if peer else divergence is None)
            if reference_method is not None
            else None
        ),
        mismatch=divergence,
        output_sha=output_digest(output),
        reference_method=reference_method,
        same_as_target=output == baseline,
        # kept for the reference, mismatches and other engines (whose models differ)
        output_ids=tuple(output) if name == BASELINE or divergence is not None or peer else None,
        wall_times_s=walls if len(walls) > 1 else None,
    )


def median_run(runs: Sequence[Measured]) -> Measured:
    """The run with the median wall time (of an even number, the faster of the middle two)."""
    ordered = sorted(runs, key=lambda run: run.output.measurement.wall_time_s)
    return ordered[(len(ordered) - 1) // 2]


def warn_mismatch(prompt: BenchPrompt, method: str, divergence: Divergence) -> None:
    detail = (
        f"{divergence.steps:.1f} {divergence.dtype} steps from the top logit"
        if divergence.steps is not None
        else "one output ended where the other did not"
    )
    print(
        f"\n!!! MISMATCH [{divergence.kind}] {method} on {prompt.task}/{prompt.id}: differs "
        f"from the target alone at new token {divergence.position} (target "
        f"{divergence.target_token}, {method} {divergence.method_token}; {detail})",
        file=sys.stderr,
    )
