"""The `dynaspec oracle` options and their defaults."""

from __future__ import annotations

import argparse

from dynaspec.models.arguments import add_dtype_and_threads, add_pair_argument, int_at_least
from dynaspec.models.presets import DEFAULT_PAIR

DEFAULT_PROMPTS = 20  # --n: prompts per task
DEFAULT_NEW_TOKENS = 128  # --max-new-tokens (what dynaspec bench decodes)
SMOKE_PROMPTS = 2  # --n with --smoke
SMOKE_NEW_TOKENS = 32  # --max-new-tokens with --smoke
RECORDS_FILE = "oracle_records.jsonl"  # one PromptRecord per line (the raw measurements)
COSTS_FILE = "oracle_costs.json"  # the measured CostProfile
COST_MAX_TOKENS = 21  # T(n) measured for n = 1..21: the longest default draft + 1


def add_oracle_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `dynaspec oracle` options to `parser`."""
    _add_run_arguments(parser)
    _add_analysis_arguments(parser)


def _add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The models, prompts and output of the run."""
    add_pair_argument(
        parser, default=DEFAULT_PAIR, help=f"model pair preset (default: {DEFAULT_PAIR})"
    )
    parser.add_argument(
        "--task",
        default="all",
        choices=("code", "summarization", "open-ended", "all"),
        help="prompt set (default: all three)",
    )
    parser.add_argument(
        "--prompts", metavar="FILE.jsonl", help="your own prompts instead of --task's"
    )
    parser.add_argument(
        "--n",
        type=int_at_least(1),
        default=None,
        help="prompts per task (default 20, --smoke 2; with --prompts: the file's first N)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the prompt sample")
    parser.add_argument(
        "--max-new-tokens",
        type=int_at_least(1),
        default=None,
        help="per prompt (default 128, --smoke 32)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="output directory (default benchmarks/oracle; with --smoke a new temporary "
        "folder, as a smoke run measures nothing worth keeping in the work tree)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny random fp32 models and random prompts; runs in seconds (CI)",
    )
    add_dtype_and_threads(parser, float32_case="--smoke")


def _add_analysis_arguments(parser: argparse.ArgumentParser) -> None:
    """What is measured and how, resuming, the report's inputs."""
    parser.add_argument(
        "--bench-jsonl",
        metavar="PATH",
        help="benchmark results (dynaspec bench) to show measured speedups next to predicted",
    )
    parser.add_argument(
        "--skip-real-oracle",
        action="store_true",
        help="take the oracle rounds from the replay only (saves the real oracle's decoding, "
        "loses the replay consistency check)",
    )
    parser.add_argument(
        "--max-prompt-chars",
        type=int_at_least(1),
        default=2000,
        help="cut summarization articles at this many characters (default 2000)",
    )
    parser.add_argument(
        "--reference-schedule",
        default=None,
        help="decode each reference speculatively with this schedule (lossless, faster) "
        "instead of with the target alone",
    )
    parser.add_argument(
        "--cost-reps",
        type=int_at_least(1),
        default=5,
        help="repetitions per point of the cost measurement",
    )
    parser.add_argument(
        "--cost-max-n",
        type=int_at_least(1),
        default=COST_MAX_TOKENS,
        help=f"measure T(n) for n = 1..N verified tokens (default {COST_MAX_TOKENS}: a draft "
        "of 20 plus the target's own token); larger n are extrapolated",
    )
    parser.add_argument(
        "--remeasure-costs",
        action="store_true",
        help="with --resume: measure the costs afresh (run it on an otherwise idle machine) "
        "and keep the prompts already measured",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help=f"reuse prompts already measured in OUT/{RECORDS_FILE} and OUT/{COSTS_FILE}; "
        "with every prompt done, re-renders the report without loading a model",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
