"""Command line: `dynaspec generate | models | serve`, and the instruments' `bench | oracle |
devicecheck | project | loadtest`.

The CLI only parses arguments, builds configuration and prints what the library returns;
the work lives in the library (`generate --compare`'s timed target-alone run is compare.py)
and the instruments (eval/: bench, oracle, devicecheck, project, loadtest). The instruments
load only inside the functions of their own command: `dynaspec generate` and `dynaspec serve`
never import dynaspec.eval (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dynaspec.compat.validation import CROSS_TOKENIZER_METHODS, cross_tokenizer_method
from dynaspec.core.config import DEFAULT_SCHEDULE
from dynaspec.core.keyed import SEED_MODES
from dynaspec.errors import DynaspecError
from dynaspec.models.arguments import (
    add_fast_arguments,
    add_model_arguments,
    apply_fast_choice,
    check_lookup_arguments,
    check_model_arguments,
    check_text_arguments,
    describe_fast,
    fast_choice_line,
    fast_options,
    float_in,
    int_at_least,
    load_named_from_arguments,
    warn_idle_flags,
)
from dynaspec.models.dtype import DtypeChoice
from dynaspec.models.loading import dtype_choice
from dynaspec.policies import SCHEDULES
from dynaspec.serve.args import add_serve_arguments


def _warm_up(models: Sequence[Any], max_length: int) -> None:
    """Compiles fast adapters now and says how long it took (not part of any timing)."""
    for role, model in zip(("target", "draft"), models, strict=False):
        if hasattr(model, "warmup"):
            seconds = model.warmup(max_length)
            if model.fast.compile:
                print(f"[{role}] {model!r}: compiled in {seconds:.1f} s", file=sys.stderr)


def _add_generate(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate text with speculative decoding",
        description="Generate text with speculative decoding. By default (--fast auto) "
        "dynaspec picks, for this kind of machine, the setting its benchmark records measured "
        "fastest among those that keep the target's exact output, and says on stderr what it "
        "picked; --quantize is the one flag that changes the output. Before a preset pair "
        "loads, the memory it needs is checked against what the machine has available.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("text", nargs="?", help="the prompt (or use --prompt)")
    p.add_argument("--prompt", help="the prompt")
    add_model_arguments(p, float32_case="the tiny pair")
    add_fast_arguments(p, auto=True)
    p.add_argument(
        "--schedule",
        default=DEFAULT_SCHEDULE,
        choices=tuple(SCHEDULES),
        help="how many tokens the draft proposes per round; adaptive: measured, cost-aware; "
        "dynamic: the published confidence rule",
    )
    p.add_argument(
        "--num-assistant-tokens",
        type=int_at_least(1, "use --no-draft to decode with the target alone"),
        default=20,
        help="most tokens drafted per round",
    )
    p.add_argument(
        "--threshold",
        type=float_in(0.0, 1.0, hint="0 turns the confidence stop off"),
        default=0.4,
        help="assistant_confidence_threshold: dynamic stops drafting below this draft probability",
    )
    _add_generation_settings(p)
    _add_draft_sources(p)
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
    p.add_argument(
        "--prompts-file",
        metavar="FILE",
        help='decode every prompt of FILE (a line each: text, or JSON with a "prompt") in '
        "batches; writes one JSON line per prompt (text, tokens, stats) to stdout",
    )
    p.add_argument(
        "--batch-size",
        type=int_at_least(1),
        default=1,
        help="with --prompts-file: prompts decoded together (left-padded)",
    )
    p.set_defaults(func=run_generate, check=lambda args: _check_generate_arguments(p, args))


def _add_draft_sources(p: argparse.ArgumentParser) -> None:
    """generate's flags for where draft tokens come from: the draft, its tokenizer, lookup."""
    p.add_argument("--no-draft", action="store_true", help="decode with the target alone")
    p.add_argument(
        "--cross-tokenizer",
        action="store_true",
        help="a --draft of another model family keeps its own tokenizer (tokenizer= and "
        "assistant_tokenizer=) and drafts by --cross-tokenizer-method; lossless",
    )
    p.add_argument(
        "--cross-tokenizer-method",
        choices=CROSS_TOKENIZER_METHODS,
        default="auto",
        help="with --cross-tokenizer: 'string' drafts through text (transformers' universal "
        "assisted generation; greedy only), 'intersection' over the tokens both tokenizers "
        "share (greedy or --sample); 'auto' (default): intersection with --sample, else string",
    )
    p.add_argument(
        "--prompt-lookup",
        type=int_at_least(1, "drop --prompt-lookup to draft without it"),
        default=None,
        metavar="N",
        help="also draft by prompt lookup, copying up to N tokens per round "
        "(prompt_lookup_num_tokens; with --no-draft: prompt lookup alone). With the adaptive "
        "schedule a large N such as 32 is safe: it copies only as far as copying pays",
    )
    p.add_argument(
        "--max-matching-ngram-size",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="prompt lookup matches n-grams of up to N tokens (default 2)",
    )


_FROM_CONFIG = "(default: the model's generation config, else {})"
_GREEDY_HINT = "greedy decoding is the default: drop --sample and --temperature"


def _add_generation_settings(p: argparse.ArgumentParser) -> None:
    """transformers' generation settings. Left out, each follows the model's
    generation_config, else dynaspec's default (greedy, 128 new tokens), as in generate()."""
    p.add_argument(
        "--max-new-tokens",
        type=int_at_least(1),
        default=None,
        help="the most new tokens to generate; code may end mid-function when it is too low "
        + _FROM_CONFIG.format(128),
    )
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument(
        "--temperature",
        type=float_in(0.0, math.inf, low_open=True, hint=_GREEDY_HINT),
        default=None,
        help="with --sample: divide the logits by this " + _FROM_CONFIG.format(1.0),
    )
    p.add_argument(
        "--top-k",
        type=int_at_least(0, "0 keeps every token"),
        default=None,
        help="with --sample: keep the k most likely tokens " + _FROM_CONFIG.format("all"),
    )
    p.add_argument(
        "--top-p",
        type=float_in(0.0, 1.0, low_open=True, hint="1 keeps every token"),
        default=None,
        help="with --sample: keep the smallest set with this probability "
        + _FROM_CONFIG.format("all"),
    )
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="with --sample: seed (default: random). It fixes the text: the target alone's "
        "with that seed, whatever drafts it (see --seed-mode)",
    )
    p.add_argument(
        "--seed-mode",
        choices=SEED_MODES,
        default="keyed",
        help="what --seed means: keyed (default), noise keyed by seed, position and token, and "
        "drafts verified by coupling; stream, a seeded random stream and rejection sampling, "
        "which repeats only with a fixed --schedule",
    )
    p.add_argument(
        "--repetition-penalty",
        type=float_in(0.0, math.inf, low_open=True, hint="1 is no penalty"),
        default=None,
        help="> 1 discourages repeats",
    )
    p.add_argument(
        "--no-repeat-ngram-size",
        type=int_at_least(0, "0 allows every repeat"),
        default=None,
        help="ban repeated n-grams of this size",
    )
    p.add_argument(
        "--stop", action="append", default=None, metavar="STRING", help="stop string (repeatable)"
    )
    p.add_argument(
        "--max-time",
        type=float_in(0.0, math.inf, low_open=True),
        default=None,
        help="stop after this many seconds",
    )


def _check_generate_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What argparse alone cannot see; then the library's own checks of the values, all
    before any model loads."""
    from dynaspec.core.config import SpecConfig

    check_model_arguments(parser, args)
    if args.prompt is not None and args.text is not None:
        parser.error("give the prompt once: as the last argument or with --prompt")
    text = args.prompt if args.prompt is not None else args.text
    _check_prompts_file(parser, args, text)
    if text is None and args.prompts_file is None:
        parser.error('give a prompt: dynaspec generate "Write a function ..."')
    if text is not None and not text.strip():
        parser.error("the prompt is empty: give some text")
    check_text_arguments(parser, text, args.stop)
    check_lookup_arguments(parser, args)
    if args.no_draft and args.draft is not None:
        parser.error("--no-draft and --draft contradict each other: drop one")
    if args.cross_tokenizer and (args.target is None or args.draft is None):
        parser.error("--cross-tokenizer acts on --target and --draft: name both models")
    if args.cross_tokenizer_method != "auto" and not args.cross_tokenizer:
        parser.error("--cross-tokenizer-method acts with --cross-tokenizer: add it")
    if args.cross_tokenizer_method == "string" and args.sample:
        parser.error(
            "--cross-tokenizer-method string drafts greedily only: drop --sample, or draft "
            "over the shared tokens with --cross-tokenizer-method intersection"
        )
    if args.stop is not None and not all(args.stop):
        parser.error("argument --stop: an empty stop string would stop at once; drop it")
    try:
        SpecConfig(
            num_assistant_tokens=args.num_assistant_tokens,
            assistant_confidence_threshold=args.threshold,
            num_assistant_tokens_schedule=args.schedule,
        )
    except DynaspecError as error:
        parser.error(error.for_cli())
    warn_idle_flags(args, sys.stderr)


def _check_prompts_file(
    parser: argparse.ArgumentParser, args: argparse.Namespace, text: str | None
) -> None:
    """--prompts-file and --batch-size: with each other, without a prompt or --compare."""
    if args.prompts_file is None:
        if args.batch_size != 1:
            parser.error("--batch-size acts with --prompts-file: add --prompts-file FILE")
        return
    if text is not None:
        parser.error("give a prompt or --prompts-file, not both")
    if args.compare:
        parser.error("--compare times one prompt: drop it with --prompts-file")
    if args.compile and args.batch_size > 1:
        parser.error(
            "--compile decodes one prompt at a time: drop it with --batch-size above 1 "
            "(--static and --quantize run in batches)"
        )
    if not Path(args.prompts_file).is_file():
        parser.error(f"--prompts-file {args.prompts_file}: no such file")


def describe_run(args: argparse.Namespace) -> str:
    """The first line of output: the models, whether a draft runs, the schedule, the dtype."""
    device = getattr(args, "device", None)
    pair = args.pair if args.target is None else None
    dtype = dtype_choice(args.dtype, pair=pair, device=device)
    if args.dtype is not None:
        dtype = DtypeChoice(dtype.dtype, f"--dtype {args.dtype}")
    if args.target is None:
        models = f"pair {args.pair}"
    else:
        models = f"target {args.target}" + (f" + draft {args.draft}" if args.draft else "")
    if args.no_draft:
        how = "the target runs alone (--no-draft)"
    elif args.target is not None and args.draft is None:
        how = "the target runs alone: no --draft given (add --draft to decode speculatively)"
    else:
        how = f"speculative, schedule {args.schedule}"
    where = f"; device {device}" if device is not None else ""
    return f"dynaspec: {models}; {how}{where}; dtype {dtype.line()}" + describe_fast(args)


def run_generate(args: argparse.Namespace) -> int:
    from transformers import TextStreamer

    from dynaspec.compare import (
        compare_with_target_alone,
        target_alone_notice,
        warm_up_both,
    )
    from dynaspec.generation import generate
    from dynaspec.prompts import render_prompt, should_use_chat

    text = args.prompt if args.prompt is not None else args.text
    choice = apply_fast_choice(args)
    print(describe_run(args), flush=True, file=sys.stderr if args.prompts_file else sys.stdout)
    if choice is not None:
        print(fast_choice_line(choice, args), file=sys.stderr, flush=True)
    if describe_fast(args):  # building the fast copies is silent and takes a while
        print(
            "loading the models and building the fast path's copies of their weights "
            "(prepacked or quantized; up to a minute)",
            file=sys.stderr,
            flush=True,
        )
    models = load_named_from_arguments(args, **fast_options(args))
    target, draft, tokenizer = models.target, models.draft, models.tokenizer
    if models.draft_tokenizer is not None:
        how = cross_tokenizer_method(args.cross_tokenizer_method, args.sample)
        words = {"string": "through text", "intersection": "over the tokens both share"}
        print(f"the draft keeps its own tokenizer: it drafts {words[how]}", file=sys.stderr)
    # Encoder-decoder models take the instruction as plain input text, never a chat template.
    seq2seq = bool(getattr(target.config, "is_encoder_decoder", False))
    chat = not args.raw and not seq2seq and (args.chat or should_use_chat(tokenizer))
    options = dict(
        num_assistant_tokens=args.num_assistant_tokens,
        assistant_confidence_threshold=args.threshold,
        num_assistant_tokens_schedule=args.schedule,
        seed=args.seed,
        seed_mode=args.seed_mode,
        tokenizer=tokenizer,
        assistant_tokenizer=models.draft_tokenizer,
        cross_tokenizer=args.cross_tokenizer_method,
        prompt_lookup_num_tokens=args.prompt_lookup,
        max_matching_ngram_size=args.max_matching_ngram_size,
        **generation_keywords(args),
    )
    if args.prompts_file is not None:
        return _run_prompts_file(args, target, draft, tokenizer, options, chat)
    input_ids = render_prompt(tokenizer, text, chat=chat)
    _warm_up([target, draft], input_ids.shape[1] + (args.max_new_tokens or 128))
    speculative = draft is not None or args.prompt_lookup is not None
    if args.compare and speculative:  # untimed warm-up of both paths
        warm_up_both(target, draft, input_ids, options)
    streamer = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    out = generate(target, draft, input_ids, streamer=streamer, **options)
    label = "target alone" if draft is None else f"{args.schedule} speculative"
    if args.prompt_lookup is not None:
        label = "prompt lookup" if draft is None else f"{label} + prompt lookup"
    print(f"[{label}] {out.stats.summary().line()}", flush=True)  # before a stderr line
    if args.compare and speculative:
        print(target_alone_notice(input_ids, out), file=sys.stderr, flush=True)
        print(compare_with_target_alone(target, input_ids, out, options))
    return 0


def _run_prompts_file(
    args: argparse.Namespace, target: Any, draft: Any, tokenizer: Any, options: dict, chat: bool
) -> int:
    from dynaspec.prompts import read_prompts, run_prompts_file

    prompts = read_prompts(args.prompts_file)
    run_prompts_file(target, draft, tokenizer, prompts, args.batch_size, options, chat)
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


def _add_models(subparsers: Any) -> None:
    p = subparsers.add_parser("models", help="list model presets and whether they are ready")
    p.set_defaults(func=lambda args: _print_models())


def _print_models() -> int:
    from dynaspec.models.loading import models_report

    print(models_report())
    return 0


# The instruments (eval/) load inside these functions only, when their command is the one
# given: each adds its command's arguments and runner to the parser.


def _bench(p: argparse.ArgumentParser) -> None:
    from dynaspec.eval.bench.args import add_bench_arguments

    add_bench_arguments(p)
    p.set_defaults(func=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    """`dynaspec bench`; its modules load only when it runs."""
    from dynaspec.eval.bench.run import run_bench

    return run_bench(args)


def _oracle(p: argparse.ArgumentParser) -> None:
    from dynaspec.eval.oracle.args import add_oracle_arguments

    add_oracle_arguments(p)
    p.set_defaults(func=_run_oracle)


def _run_oracle(args: argparse.Namespace) -> int:
    """`dynaspec oracle`; its modules load only when it runs."""
    from dynaspec.eval.oracle.run import run_oracle

    return run_oracle(args)


def _devicecheck(p: argparse.ArgumentParser) -> None:
    from dynaspec.eval.devicecheck.run import add_devicecheck_arguments, run_devicecheck

    add_devicecheck_arguments(p)
    p.set_defaults(func=run_devicecheck)


def _project(p: argparse.ArgumentParser) -> None:
    from dynaspec.eval.projection import add_project_arguments, run_project

    add_project_arguments(p)
    p.set_defaults(func=run_project)


def _loadtest(p: argparse.ArgumentParser) -> None:
    from dynaspec.eval.loadtest import add_loadtest_arguments

    add_loadtest_arguments(p)  # its runner and check too


def _results(p: argparse.ArgumentParser) -> None:
    from dynaspec.eval.results.run import add_results_arguments

    add_results_arguments(p)  # its runner too


# The instruments' subcommands: name, help, the function adding its arguments and runner.
_INSTRUMENTS: tuple[tuple[str, str, Callable[[argparse.ArgumentParser], None]], ...] = (
    ("bench", "benchmark schedules and peers side by side", _bench),
    ("oracle", "oracle lookahead analysis over a data set", _oracle),
    ("devicecheck", "cuda tests and real-shape costs on a GPU in one short run", _devicecheck),
    ("project", "project speedups from devicecheck costs and the oracle's traces", _project),
    (
        "loadtest",
        "concurrent clients against dynaspec serve (or --url), outputs checked",
        _loadtest,
    ),
    ("results", "docs/results.md and the README's hardware table from benchmarks/", _results),
)


def _add_serve(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="an OpenAI-compatible server that decodes speculatively (docs/serve.md)",
        formatter_class=DefaultsHelpFormatter,
    )
    add_serve_arguments(p)


def _add_instruments(subparsers: Any, command: str | None) -> None:
    """The instruments' subcommands; only `command`'s gets its arguments (all of them when
    `command` is None), so that no other command loads an instrument."""
    for name, help_text, add in _INSTRUMENTS:
        p = subparsers.add_parser(name, help=help_text, formatter_class=DefaultsHelpFormatter)
        if command is None or command == name:
            add(p)


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help shows each option's default, unless it is None or False (those say in words
    what they do when absent) or the help text already names it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if action.default in (None, False) or "default" in text:
            return text
        return super()._get_help_string(action)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; given the `command` about to run, the instruments' subcommands
    other than it are left without their arguments (and their modules unloaded)."""
    from dynaspec import __version__

    parser = argparse.ArgumentParser(
        prog="dynaspec", description="Lossless dynamic speculative decoding."
    )
    parser.add_argument("--version", action="version", version=f"dynaspec {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    _add_generate(subparsers)
    _add_models(subparsers)
    _add_serve(subparsers)
    _add_instruments(subparsers, command)
    return parser


def _command(argv: Sequence[str] | None) -> str:
    """The subcommand named in `argv` (the first word not an option), "" when none is."""
    words = sys.argv[1:] if argv is None else argv
    return next((word for word in words if not word.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 done; 2 an argument is wrong in itself (argparse's usage error, before
    any model loads); 1 something found wrong while working (a missing or damaged file, a
    model that does not fit), printed as one line "error: ..." with the fix."""
    try:
        args = build_parser(_command(argv)).parse_args(argv)
        check = getattr(args, "check", None)
        if check is not None:
            check(args)
    except SystemExit as exit_:  # argparse: --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return int(args.func(args) or 0)
    except DynaspecError as err:
        print(f"error: {err.for_cli()}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
