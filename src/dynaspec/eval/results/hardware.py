"""The README's hardware table: per machine class, the command for the target's exact output
and the command for the fastest output (a quantized target's own), each with its tok/s and
speedup over the eager target from one committed run of the speed suite.

The block lies in README.md between the marker lines below; `dynaspec results` rewrites what
is between them and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

from dynaspec.eval.results.records import MethodFigure, Run

BEGIN = "<!-- results:hardware -->"
END = "<!-- /results:hardware -->"
CPU_ROWS = {  # machine class -> the row's name (the dtype its machine rule picks)
    "AVX2 CPU": "AVX2 CPU (float32)",
    "AVX512-BF16 CPU": "AVX512-BF16 + VNNI CPU (bf16)",
}
GPU_ROW = "CUDA GPU"
GPU_NAME = "CUDA GPU (bf16)"
# what a GPU user runs (--device, as load_pair(device=...)); no committed run measured it
GPU_COMMAND = 'dynaspec generate --device cuda --prompt-lookup 32 "..."'
GPU_FASTEST = "none: `--quantize` runs on CPUs only"
NOT_MEASURED = "not measured"
BASELINE = "before"  # a folder of runs of older code, measured as a comparison's baseline
HEADER = (
    "| machine | the target's exact output | tok/s | fastest: a quantized target's output | "
    "tok/s |\n|---|---|---:|---|---:|"
)


def _best(runs: Sequence[Run], exact: bool) -> tuple[MethodFigure, Run] | None:
    """The dynaspec method with the highest median speedup over the eager target, among the
    exact-output ones or the quantized targets' (exact=False), with the run that measured it."""
    found = [
        (figure, run)
        for run in runs
        for figure in run.methods
        if figure.command
        and figure.speedup is not None
        and figure.method != "target"
        and figure.exact == exact
        and figure.bugs == 0
    ]
    return max(found, key=lambda pair: pair[0].speedup or 0.0, default=None)


def _cells(chosen: tuple[MethodFigure, Run] | None) -> str:
    """'command | tok/s (speedup)' of the chosen method, or 'not measured' twice."""
    if chosen is None or chosen[0].command is None or chosen[0].speedup is None:
        return f"{NOT_MEASURED} | {NOT_MEASURED}"
    figure = chosen[0]
    command = figure.command.replace('"PROMPT"', '"..."')
    return f"`{command}` | {figure.tokens_per_s:.1f} ({figure.speedup:.2f}x)"


def _gpu_measured(runs: Sequence[Run]) -> str:
    """What benchmarks/gpu measured: random weights of real shapes, projected speedups."""
    projections = [run for run in runs if run.kind == "projection"]
    if not projections:
        return NOT_MEASURED
    run = projections[-1]
    adaptive = [float(row[4].rstrip("x")) for row in run.table.rows if row[4] != "-"]
    device = run.machine.split(";")[0]
    return (
        f"{NOT_MEASURED} (random weights of real shapes on an {device}: `adaptive` projected "
        f"at {min(adaptive):.2f}-{max(adaptive):.2f}x the target alone)"
    )


def render_hardware(runs: Sequence[Run]) -> str:
    """The block's lines between the markers (markers excluded): per CPU class the best
    exact-output and the best quantized setting of the speed suite's runs, each from one run;
    a `before/` folder's run (older code measured as a baseline) is on the results page only."""
    speed = [
        run
        for run in runs
        if run.suite == "speed" and run.kind == "bench" and BASELINE not in run.path.split("/")
    ]
    lines = [HEADER]
    for machine_class, name in CPU_ROWS.items():
        of_class = [run for run in speed if run.machine_class == machine_class]
        lines.append(
            f"| {name} | {_cells(_best(of_class, True))} | {_cells(_best(of_class, False))} |"
        )
    gpu = [run for run in runs if run.machine_class == GPU_ROW]
    lines.append(f"| {GPU_NAME} | `{GPU_COMMAND}` | {_gpu_measured(gpu)} | {GPU_FASTEST} | |")
    return "\n".join(lines)


def replace_block(readme: str, block: str) -> str | None:
    """README text with the block between the markers replaced; None without both markers."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        return None
    head = readme[: start + len(BEGIN)]
    return f"{head}\n{block}\n{readme[end:]}"
