"""The `dynaspec bench` options, their defaults, and the command line that reproduces a run."""

from __future__ import annotations

import argparse
import math

from dynaspec.eval import provenance
from dynaspec.eval.bench.methods import DEFAULT_METHODS, METHODS
from dynaspec.mismatch import DEFAULT_TIE_STEPS
from dynaspec.models.arguments import (
    ModelFlagsHelp,
    add_cuda_graphs_argument,
    add_model_arguments,
    check_device_arguments,
    float_in,
    int_at_least,
)
from dynaspec.models.presets import DEFAULT_PAIR

DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_N = 10  # prompts per task
SMOKE_MAX_NEW_TOKENS = 16
SMOKE_N = 1  # prompts per smoke task
# Said after a smoke run's summary and in its table.md: its speedups are not a result.
SMOKE_NOTE = (
    "smoke run: random tiny models, whose draft rarely agrees with the target and whose "
    "forwards are so small that per-round overhead dominates, so every speculative method "
    "is expected to be slower than the target alone here. The run checks that every method "
    "runs and that every output equals the target alone's (mismatches 0); measure speedups "
    "with a real pair (--pair)."
)
MODEL_FLAGS_HELP = ModelFlagsHelp(  # bench needs both --target and --draft, or neither
    pair=f"pair preset name (default: {DEFAULT_PAIR}; 'tiny')",
    target="target model: preset name, folder, .gguf or hub id",
    draft="draft model (with --target)",
)


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `dynaspec bench` options to `parser`."""
    models = parser.add_argument_group("models")
    add_model_arguments(
        models, float32_case="the tiny pair", threads="; 1 with --smoke", help=MODEL_FLAGS_HELP
    )
    models.add_argument(
        "--smoke",
        action="store_true",
        help="tiny built-in random models and prompts, fp32: a CI check in seconds",
    )
    data = parser.add_argument_group("prompts")
    data.add_argument(
        "--task",
        default="all",
        help="summarization | open-ended | code | all | grounded, or several separated by "
        "commas (default: all = the first three)",
    )
    data.add_argument(
        "--n", type=int_at_least(1), default=None, help=f"prompts per task (default {DEFAULT_N})"
    )
    data.add_argument("--seed", type=int, default=0, help="prompt sample seed (default 0)")
    data.add_argument("--prompts", help="JSONL file of your own prompts instead of --task")
    data.add_argument(
        "--chat",
        choices=("auto", "yes", "no"),
        default="auto",
        help="apply the chat template: auto = when the tokenizer has one (default)",
    )
    data.add_argument(
        "--max-prompt-chars",
        type=int_at_least(1),
        default=2000,
        help="cut summarization articles at this many characters (default 2000)",
    )
    run = parser.add_argument_group("run")
    run.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"comma-separated subset of: {', '.join(METHODS)} (default: all but the fast "
        "methods and the other engines' (llama.cpp, OpenVINO GenAI: benchmarks/README.md))",
    )
    run.add_argument(
        "--max-new-tokens",
        type=int_at_least(1),
        default=None,
        help=f"new tokens per generation (default {DEFAULT_MAX_NEW_TOKENS}; "
        f"--smoke: {SMOKE_MAX_NEW_TOKENS})",
    )
    run.add_argument(
        "--tie-steps",
        type=float_in(0.0, math.inf),
        default=DEFAULT_TIE_STEPS,
        help="a mismatch within this many dtype steps of the top logit is a tie (default 4)",
    )
    _add_repeat(run)
    _add_fast_compile(run)
    add_cuda_graphs_argument(run, path="the fast methods on")
    run.add_argument(
        "--batch",
        metavar="SIZES",
        default=None,
        help="throughput by batch size instead, e.g. 1,2,4,8: every method on the same "
        "batches (methods: hf-target, target, adaptive, hybrid, prompt-lookup, and the fast "
        "path's static-target, static-adaptive, static-hybrid (static KV cache, prepacked "
        "weights; about twice the weights' memory), and on AVX512-VNNI the integer targets' "
        "w8a8-target, w8a8-adaptive, w8a8-hybrid, w4a8-target, w4a8-adaptive, w4a8-hybrid "
        "(outputs of their own, compared with their own target alone); default all but those)",
    )
    run.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up")
    parser.set_defaults(check=lambda args: check_device_arguments(parser, args))
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--out",
        help="output folder (default: benchmarks/speed/<pair>-<date>, with --batch "
        "benchmarks/batch/<pair>-<date>; with --smoke a new "
        "temporary folder, named on the first line)",
    )


def _add_repeat(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--repeat",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="time every method N times per prompt, each time in a new order; a record "
        "keeps the run with the median wall time and lists every run's (wall_times_s); "
        "every run's output is compared with the target alone's (default 1)",
    )


def _add_fast_compile(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--fast-compile",
        action="store_true",
        help="compile the fast methods' forwards with torch.compile (default: eager with "
        "prepacked weights)",
    )


def equivalent_command(args: argparse.Namespace) -> str:
    """`dynaspec bench ...` with the options of `args` that differ from the defaults."""
    return provenance.equivalent_command("bench", add_bench_arguments, args)
