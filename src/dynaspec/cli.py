"""Command line: `dynaspec generate | models | bench | oracle | devicecheck | project`.

The CLI only parses arguments and builds configuration; the work lives in the library.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from dynaspec.core.config import SCHEDULES
from dynaspec.errors import DynaspecError
from dynaspec.models.loading import DEFAULT_DTYPE, DTYPE_CHOICES, load_models
from dynaspec.models.presets import DEFAULT_PAIR


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """--pair / --target / --draft / --dtype / --threads, shared by every subcommand."""
    parser.add_argument(
        "--pair",
        default=DEFAULT_PAIR,
        help=f"preset pair (default {DEFAULT_PAIR}; 'tiny' = built-in random models, no download)",
    )
    parser.add_argument("--target", help="target model: preset name, HF folder, .gguf or hub id")
    parser.add_argument("--draft", help="draft model: preset name, HF folder, .gguf or hub id")
    parser.add_argument(
        "--dtype",
        default=None,
        choices=DTYPE_CHOICES,
        help=f"weights dtype (default {DEFAULT_DTYPE}: fastest on CPU; the tiny pair: float32)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: all cores)"
    )


def _add_generate(subparsers: Any) -> None:
    p = subparsers.add_parser("generate", help="generate text with speculative decoding")
    p.add_argument("text", nargs="?", help="the prompt (or use --prompt)")
    p.add_argument("--prompt", help="the prompt")
    add_model_arguments(p)
    p.add_argument("--schedule", default="dynamic", choices=SCHEDULES)
    p.add_argument("--num-assistant-tokens", type=int, default=20)
    p.add_argument("--threshold", type=float, default=0.4, help="assistant_confidence_threshold")
    # Generation settings left unset fall back to the model's generation_config, else to
    # dynaspec's defaults (greedy, 128 new tokens), as in dynaspec.generate.
    p.add_argument("--max-new-tokens", type=int, default=None, help="default 128")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--repetition-penalty", type=float, default=None, help="> 1 discourages repeats")
    p.add_argument("--no-repeat-ngram-size", type=int, default=None, help="ban repeated n-grams")
    p.add_argument(
        "--stop", action="append", default=None, metavar="STRING", help="stop string (repeatable)"
    )
    p.add_argument("--max-time", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--no-draft", action="store_true", help="decode with the target alone")
    p.add_argument(
        "--prompt-lookup",
        type=int,
        default=None,
        metavar="N",
        help="also draft by prompt lookup, copying up to N tokens per round "
        "(prompt_lookup_num_tokens; with --no-draft: prompt lookup alone)",
    )
    p.add_argument(
        "--max-matching-ngram-size",
        type=int,
        default=None,
        metavar="N",
        help="prompt lookup matches n-grams of up to N tokens (default 2)",
    )
    chat = p.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        action="store_true",
        help="apply the chat template (default when the tokenizer has one)",
    )
    chat.add_argument("--raw", action="store_true", help="do not apply the chat template")
    p.add_argument(
        "--compare",
        action="store_true",
        help="also decode with the target alone and print the speedup and whether the "
        "outputs are identical",
    )
    p.set_defaults(func=run_generate)


def run_generate(args: argparse.Namespace) -> int:
    from transformers import TextStreamer

    from dynaspec.eval.data import render_prompt, should_use_chat
    from dynaspec.generation import generate

    text = args.prompt if args.prompt is not None else args.text
    if text is None:
        print('error: give a prompt: dynaspec generate "Write a function ..."', file=sys.stderr)
        return 2
    target, draft, tokenizer = load_models(
        args.pair, target=args.target, draft=args.draft, dtype=args.dtype, threads=args.threads
    )
    if args.no_draft:
        draft = None
    # Encoder-decoder models take the instruction as plain input text, never a chat template.
    seq2seq = bool(getattr(target.config, "is_encoder_decoder", False))
    chat = not args.raw and not seq2seq and (args.chat or should_use_chat(tokenizer))
    input_ids = render_prompt(tokenizer, text, chat=chat)
    options = dict(
        num_assistant_tokens=args.num_assistant_tokens,
        assistant_confidence_threshold=args.threshold,
        num_assistant_tokens_schedule=args.schedule,
        seed=args.seed,
        tokenizer=tokenizer,
        prompt_lookup_num_tokens=args.prompt_lookup,
        max_matching_ngram_size=args.max_matching_ngram_size,
        **generation_keywords(args),
    )
    plain = {**options, "prompt_lookup_num_tokens": None, "max_matching_ngram_size": None}
    speculative = draft is not None or args.prompt_lookup is not None
    if args.compare and speculative:  # untimed warm-up of both paths
        warm = {"max_new_tokens": min(4, args.max_new_tokens or 4)}
        generate(target, draft, input_ids, **{**options, **warm})
        generate(target, None, input_ids, **{**plain, **warm})
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    out = generate(target, draft, input_ids, streamer=streamer, **options)
    summary = out.stats.summary()
    label = "target alone" if draft is None else f"{args.schedule} speculative"
    if args.prompt_lookup is not None:
        label = "prompt lookup" if draft is None else f"{label} + prompt lookup"
    print(f"[{label}] {summary.line()}")
    if args.compare and speculative:
        started = time.perf_counter()
        alone = generate(target, None, input_ids, **plain)
        alone_s = time.perf_counter() - started
        same = torch.equal(alone.sequences, out.sequences)
        verdict = "identical" if same else "DIFFERENT"
        if out.stats.do_sample:
            verdict += " (sampling: outputs differ by design; distributions are equal)"
        elif not same and not getattr(target.config, "is_encoder_decoder", False):
            verdict += _explain_divergence(target, input_ids, alone.sequences, out.sequences)
        speedup = alone_s / summary.wall_time_s
        print(
            f"[target alone] {alone.stats.summary().line()}\n"
            f"speedup {speedup:.2f}x over the target alone; outputs {verdict}"
        )
    return 0


def generation_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """transformers' generation keywords for the options given on the command line."""
    chosen = {
        "max_new_tokens": args.max_new_tokens,
        "do_sample": True if args.sample else None,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "repetition_penalty": args.repetition_penalty,
        "no_repeat_ngram_size": args.no_repeat_ngram_size,
        "stop_strings": args.stop,
        "max_time": args.max_time,
    }
    return {key: value for key, value in chosen.items() if value is not None}


def _explain_divergence(
    target: Any, input_ids: torch.Tensor, alone: torch.Tensor, speculative: torch.Tensor
) -> str:
    """Classifies a greedy divergence: a numerical tie of the target's top logits, or a bug."""
    from dynaspec.eval.mismatch import classify_mismatch

    start = input_ids.shape[1]
    divergence = classify_mismatch(
        target, input_ids, alone[0, start:].tolist(), speculative[0, start:].tolist()
    )
    if divergence.kind == "tie":
        return (
            f" at new token {divergence.position}: a {divergence.dtype} tie (the target's top"
            f" logits {divergence.steps:.1f} steps apart; multi-token and single-token forwards"
            " round differently there), not a bug."
        )
    return f" at new token {divergence.position}: NOT a numerical tie. Please report this bug."


def _add_models(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="list model presets and whether they are ready")
    p.set_defaults(func=lambda args: _print_models())


def _print_models() -> int:
    from dynaspec.models.loading import models_report

    print(models_report())
    return 0


def _add_bench(subparsers: Any) -> None:
    from dynaspec.eval.bench.args import add_bench_arguments
    from dynaspec.eval.bench.run import run_bench

    p = subparsers.add_parser("bench", help="benchmark schedules and peers side by side")
    add_bench_arguments(p)
    p.set_defaults(func=run_bench)


def _add_oracle(subparsers: Any) -> None:
    from dynaspec.eval.oracle.args import add_oracle_arguments
    from dynaspec.eval.oracle.run import run_oracle

    p = subparsers.add_parser("oracle", help="oracle lookahead analysis over a data set")
    add_oracle_arguments(p)
    p.set_defaults(func=run_oracle)


def _add_devicecheck(subparsers: Any) -> None:
    from dynaspec.eval.devicecheck.run import add_devicecheck_arguments, run_devicecheck

    p = subparsers.add_parser(
        "devicecheck", help="cuda tests and real-shape costs on a GPU in one short run"
    )
    add_devicecheck_arguments(p)
    p.set_defaults(func=run_devicecheck)


def _add_project(subparsers: Any) -> None:
    from dynaspec.eval.projection import add_project_arguments, run_project

    p = subparsers.add_parser(
        "project", help="project speedups from devicecheck costs and the oracle's traces"
    )
    add_project_arguments(p)
    p.set_defaults(func=run_project)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dynaspec", description="Lossless dynamic speculative decoding."
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_generate(subparsers)
    _add_models(subparsers)
    _add_bench(subparsers)
    _add_oracle(subparsers)
    _add_devicecheck(subparsers)
    _add_project(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DynaspecError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
