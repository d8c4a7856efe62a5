"""The command line's model flags and checked argument types (generate, bench, oracle).

The flags every subcommand shares are defined here once: --pair, --target, --draft,
--device, --dtype, --threads, and the fast path's --static, --compile, --quantize,
--draft-quantize, --cuda-graphs, with the checks of how they combine. Each type checks one
value as argparse reads it, so a bad value stops the command with argparse's usage message
and exit code 2 before any model loads, and the message names the flag (argparse prefixes
"argument --threads: ") and the fix in the CLI's words.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dynaspec.errors import ConfigError, DynaspecError
from dynaspec.models.devices import (
    check_cpu_only_options,
    device_name,
    resolve_device,
    use_cuda_graphs,
)
from dynaspec.models.dtype import DEFAULT_DTYPE, DTYPE_CHOICES
from dynaspec.models.fast_choice import AUTO, FastChoice, choose_fast
from dynaspec.models.presets import DEFAULT_PAIR, pair_presets

TINY_PAIR = "tiny"  # built-in random models (dynaspec.models.tiny): nothing to download

ArgumentTarget = argparse.ArgumentParser | argparse._ArgumentGroup


@dataclass(frozen=True)
class ModelFlagsHelp:
    """The help lines of --pair, --target and --draft; a subcommand may word them briefly."""

    pair: str = (
        f"preset pair (default: {DEFAULT_PAIR}; '{TINY_PAIR}' = built-in random models, "
        "nothing to download)"
    )
    target: str = "target model: preset name, HF folder, .gguf or hub id"
    draft: str = "draft model (with --target): preset name, HF folder, .gguf or hub id"


def int_at_least(minimum: int, hint: str = "") -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`; `hint` says what to do instead."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            fix = f"; {hint}" if hint else ""
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}{fix}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def float_in(
    low: float, high: float, *, low_open: bool = False, hint: str = ""
) -> Callable[[str], float]:
    """An argparse type: a finite number in [low, high] ((low, high] with `low_open`)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    if math.isinf(high):
        interval = f"{'>' if low_open else '>='} {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        above_low = value > low if low_open else value >= low
        if not (math.isfinite(value) and above_low and value <= high):
            fix = f"; {hint}" if hint else ""
            raise argparse.ArgumentTypeError(f"must be {_words(interval)}, got {text}{fix}")
        return value

    parse.__name__ = f"number {_words(interval)}"
    return parse


def _words(interval: str) -> str:
    """ "[0, 1]" -> "in [0, 1]"; "> 0" stays."""
    return interval if interval.startswith((">", "<")) else f"in {interval}"


def pair_name(text: str) -> str:
    """An argparse type: a pair preset name (any case) or "tiny"."""
    name = text.strip().lower()
    known = [*pair_presets(), TINY_PAIR]
    if name not in known:
        raise argparse.ArgumentTypeError(
            f"unknown pair {text!r}: choose one of {', '.join(known)} ({TINY_PAIR}: built-in "
            "random models, nothing to download)"
        )
    return name


def add_pair_argument(
    parser: ArgumentTarget, *, default: str | None = None, help: str = ModelFlagsHelp.pair
) -> None:
    """--pair: a preset pair name or "tiny" (checked by `pair_name`)."""
    parser.add_argument("--pair", type=pair_name, default=default, help=help)


def add_model_arguments(
    parser: ArgumentTarget,
    *,
    float32_case: str,
    threads: str = "",
    help: ModelFlagsHelp | None = None,
) -> None:
    """--pair / --target / --draft / --device / --dtype / --threads. --pair defaults to None
    here: `check_model_arguments` (or the subcommand) fills in the default pair. `float32_case`
    and `threads` as in `add_dtype_and_threads`; `help` words the model flags."""
    help = help or ModelFlagsHelp()
    add_pair_argument(parser, help=help.pair)
    parser.add_argument("--target", help=help.target)
    parser.add_argument("--draft", help=help.draft)
    parser.add_argument(
        "--device",
        type=device_name,
        default=None,
        help="where the models run: cpu, cuda or cuda:N (default: cpu)",
    )
    add_dtype_and_threads(parser, float32_case=float32_case, threads=threads)


def check_model_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Combinations of model arguments that cannot work: argparse's error (exit 2). With
    neither --pair nor --target, --pair becomes the default pair."""
    if args.target is not None and args.pair is not None:
        parser.error("give --pair or --target (with --draft), not both")
    if args.draft is not None and args.target is None:
        parser.error("--draft needs --target (a --pair brings its own draft)")
    if args.pair is None and args.target is None:
        args.pair = DEFAULT_PAIR
    check_device_arguments(parser, args)


def check_device_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--device names a device this machine has (else one line naming the fix, exit 2) and
    no CPU-only fast-path flag goes with a GPU (argparse's error, exit 2)."""
    device = getattr(args, "device", None)
    try:
        resolve_device(device)
    except DynaspecError as error:
        parser.exit(2, f"{parser.prog}: error: {error.for_cli()}\n")
    draft_quantize = getattr(args, "draft_quantize", None)
    try:
        check_cpu_only_options(
            device,
            quantize=getattr(args, "quantize", None),
            draft_quantize=None if draft_quantize == "none" else draft_quantize,
            draft_engine=getattr(args, "draft_engine", "torch"),
        )
        if getattr(args, "cuda_graphs", None):  # a CUDA GPU, and not beside --compile
            use_cuda_graphs(device, True, static=True, compile=getattr(args, "compile", False))
    except DynaspecError as error:
        parser.error(error.for_cli())


# What --quantize and --draft-quantize accept: the settings some CPU class measured fastest.
# int4 weights with float activations left: slower than int8 on the AVX2 CPU (0.88x) and
# than w4a8 / w8a8 on the AVX512-BF16 one (hybrids 0.93x / 0.87x; benchmarks/HISTORY.md:
# int4-kernel-avx2-2026-12-02, w8a8-avx512-2026-12-04).
TARGET_QUANTIZE = ("int8", "w8a8", "w4a8")
DRAFT_QUANTIZE = ("none", *TARGET_QUANTIZE)

FAST_HELP = (
    "auto: for this kind of machine, the setting measured fastest among those that keep "
    "the target's exact output (the static path, the draft's quantization, prompt lookup "
    "under adaptive; said on stderr), "
    "unless --static, --compile, --quantize, --draft-quantize or --draft-engine is given "
    "(then those decide) or --prompt-lookup N (then N); preset pairs only (--target models "
    "run as asked); off: the models as loaded"
)


def add_fast_arguments(parser: ArgumentTarget, *, auto: bool = False) -> None:
    """--static / --compile / --quantize / --draft-quantize: the fast path (backends/static);
    --draft-engine: the draft run by llama.cpp (backends/llamacpp); with `auto` (generate,
    serve) --fast auto|off: whether dynaspec chooses for this machine (`apply_fast_choice`)."""
    if auto:
        parser.add_argument("--fast", choices=("auto", "off"), default=AUTO, help=FAST_HELP)
    parser.add_argument(
        "--static",
        action="store_true",
        help="static KV cache; bf16 weights on dynaspec's bit-exact kernel (AVX512-BF16: "
        "speculative output equals the target alone's bit for bit), else prepacked for "
        "oneDNN (float32 on a CPU without native bf16); Llama/Qwen2-style models",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="static KV cache + torch.compile'd forwards (Llama/Qwen2-style models; compiles "
        "once per forward shape, at the start). The target's own output",
    )
    parser.add_argument(
        "--quantize",
        choices=TARGET_QUANTIZE,
        default=None,
        help="CHANGES THE OUTPUT (the one flag that does): the target's weights, and by default "
        "the draft's, in 8 bits (int8: a CPU without native bf16), or with 8-bit activations "
        "too on AVX512-VNNI (w8a8; w4a8: 4 bits where a layer's weights lie on a 4-bit grid, "
        "8 elsewhere); the output is then the quantized target's own",
    )
    parser.add_argument(
        "--draft-quantize",
        choices=DRAFT_QUANTIZE,
        default=None,
        help="the draft's weights alone (default: as --quantize): none keeps its dtype; w4a8 "
        "puts every layer in 4 bits. The output stays the target's; only the draft's speed "
        "and agreement change",
    )
    parser.add_argument(
        "--draft-engine",
        choices=("torch", "llamacpp"),
        default="torch",
        help="llamacpp: the draft's GGUF (the preset's, or --draft FILE.gguf) run by llama.cpp, "
        'on the CPU; needs pip install "dynaspec[llamacpp]". The output stays the target\'s',
    )
    add_cuda_graphs_argument(parser)


def add_cuda_graphs_argument(parser: ArgumentTarget, *, path: str = "--static") -> None:
    """--cuda-graphs / --no-cuda-graphs: CUDA graphs on the static path (backends/graphs.py);
    None when neither is given (on wherever `path` runs on a CUDA GPU)."""
    parser.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"on a CUDA GPU, replay each forward of the static path as a CUDA graph, padded "
        f"to 1, 2, 4, 8, 16 or 32 tokens and batch rows (default: on with {path} "
        "--device cuda; --cuda-graphs alone implies --static; CUDA only); "
        "--no-cuda-graphs: kernel by kernel. The target's own output",
    )


def fast_options(args: argparse.Namespace) -> dict[str, Any]:
    """load_models() keywords from the flags: fast="auto" where `apply_fast_choice` chose
    for the machine, else static=, compile=, quantize=, draft_quantize=, draft_engine=."""
    if getattr(args, "fast_choice", None) is not None:
        return {"fast": AUTO}
    options: dict[str, Any] = {
        "static": bool(getattr(args, "static", False)),
        "compile": bool(getattr(args, "compile", False)),
        "quantize": getattr(args, "quantize", None),
    }
    draft_quantize = getattr(args, "draft_quantize", None)
    if draft_quantize is not None:
        options["draft_quantize"] = None if draft_quantize == "none" else draft_quantize
    if getattr(args, "cuda_graphs", None) is not None:
        options["cuda_graphs"] = args.cuda_graphs
    if getattr(args, "draft_engine", "torch") != "torch":
        options["draft_engine"] = args.draft_engine
    return options


def _fast_flags_given(args: argparse.Namespace) -> bool:
    """Whether any fast-path flag was given (then they decide, not --fast auto)."""
    return bool(
        getattr(args, "static", False)
        or getattr(args, "compile", False)
        or getattr(args, "quantize", None)
        or getattr(args, "draft_quantize", None) is not None
        or getattr(args, "draft_engine", "torch") != "torch"
        or getattr(args, "cuda_graphs", None)
    )


def apply_fast_choice(args: argparse.Namespace) -> FastChoice | None:
    """--fast auto (generate, serve): the choice of `models.fast_choice.choose_fast` for
    this machine, kept on `args.fast_choice` (the loaders then get fast="auto"), and prompt
    lookup set on `args.prompt_lookup` under the adaptive schedule with a draft. Any
    fast-path flag keeps the path yours; --prompt-lookup N keeps N. None where nothing is
    chosen: --fast off, models named by --target (they run as asked), the tiny pair (for
    checks: it runs as loaded), or every part given."""
    if getattr(args, "fast", "off") != AUTO or args.target is not None or args.pair == TINY_PAIR:
        return None
    given = _fast_flags_given(args)  # then only prompt lookup is chosen: no kernel build
    choice = choose_fast(getattr(args, "device", None), args.dtype, w4a8=False if given else None)
    drafting = not getattr(args, "no_draft", False) and not getattr(args, "cross_tokenizer", False)
    drafting = drafting and getattr(args, "schedule", "") == "adaptive"
    lookup = args.prompt_lookup is None and drafting and choice.prompt_lookup is not None
    if lookup:
        args.prompt_lookup = choice.prompt_lookup
    if given:
        return choice if lookup else None
    args.fast_choice = choice
    return choice


def fast_choice_line(choice: FastChoice, args: argparse.Namespace) -> str:
    """One stderr line: what --fast auto chose here, from which record, how to change it."""
    path = getattr(args, "fast_choice", None) is not None
    flags = choice.flags() if path else ""
    if not path and args.prompt_lookup:
        flags = f"--prompt-lookup {args.prompt_lookup}"
    if getattr(args, "no_draft", False):
        flags = "--static" if path and choice.static else ""
    picked = flags or "the models as loaded"
    return (
        f"dynaspec: --fast auto chose {picked} for {choice.machine} ({choice.record}; the "
        "target's exact output): --fast off keeps the models as loaded, and --quantize trades "
        "that output for speed"
    )


def describe_fast(args: argparse.Namespace) -> str:
    """The fast-path flags as they apply to each model, for the first line of output
    ("; fast path: target ...; draft ..."), or "" when none is given."""
    choice = getattr(args, "fast_choice", None)
    options = (
        fast_options(args)
        if choice is None
        else {
            "static": choice.static,
            "compile": False,
            "quantize": None,
            "draft_quantize": choice.draft_quantize,
        }
    )
    draft_quantize = options.get("draft_quantize", options["quantize"])
    fast = options["static"] or options["compile"] or options["quantize"] or draft_quantize
    if not (fast or options.get("draft_engine") or options.get("cuda_graphs")):
        return ""

    graphs = use_cuda_graphs(
        getattr(args, "device", None),
        options.get("cuda_graphs"),
        static=options["static"],
        compile=options["compile"],
    )

    def words(quantize: str | None) -> str:
        if not (options["static"] or options["compile"] or quantize or graphs):
            return "transformers' forward"
        parts = ["static KV cache"]
        if options["compile"]:
            parts.append("torch.compile")
        if graphs:
            parts.append("CUDA graphs")
        if quantize:
            parts.append(f"{quantize} weights")
        return " + ".join(parts)

    text = f"; fast path: target {words(options['quantize'])}"
    if getattr(args, "no_draft", False):
        return text
    if options.get("draft_engine") == "llamacpp":
        return text + "; draft llama.cpp on its GGUF"
    return text + f"; draft {words(draft_quantize)}"


def add_dtype_and_threads(
    parser: ArgumentTarget,
    *,
    float32_case: str,
    threads: str = "",
) -> None:
    """--dtype and --threads, the same for generate, bench and oracle. `float32_case` names
    what loads in float32 regardless (the tiny pair, --smoke); `threads` adds to the default."""
    parser.add_argument(
        "--dtype",
        default=None,
        choices=DTYPE_CHOICES,
        help=f"weights dtype (default: {DEFAULT_DTYPE}: bfloat16 where the CPU multiplies bf16 "
        f"natively (AVX512-BF16 or AMX), else float32; {float32_case}: float32). auto: the "
        "checkpoint's own dtype",
    )
    parser.add_argument(
        "--threads",
        type=int_at_least(1, "omit --threads to use every core"),
        default=None,
        help=f"torch threads (default: all cores{threads})",
    )


def check_text_arguments(
    parser: argparse.ArgumentParser, prompt: str | None, stops: list[str] | None
) -> None:
    """The prompt and --stop strings must be text: bytes that are not UTF-8 (which Python
    keeps as surrogates) stop the command with a usage error, before any model loads."""
    texts = [("the prompt", prompt)] if prompt is not None else []
    for label, text in texts + [("argument --stop", s) for s in stops or []]:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            byte = ord(text[error.start]) - 0xDC00  # surrogateescape: 0xDC80-0xDCFF
            seen = f" (byte 0x{byte:02x})" if 0x80 <= byte < 0x100 else ""
            parser.error(
                f"{label}: holds bytes that are not UTF-8 text{seen}: pass it in UTF-8 "
                "(e.g. convert it with iconv -t UTF-8)"
            )


def check_lookup_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--max-matching-ngram-size only acts with --prompt-lookup."""
    if args.max_matching_ngram_size is not None and args.prompt_lookup is None:
        parser.error(
            "argument --max-matching-ngram-size: only acts with prompt lookup: add "
            "--prompt-lookup N (e.g. 10), or drop it"
        )


# Sampling flags that change nothing when decoding is greedy.
_SAMPLING_FLAGS = (("temperature", "--temperature"), ("top_k", "--top-k"), ("top_p", "--top-p"))


def warn_idle_flags(args: argparse.Namespace, stream: Any) -> None:
    """One line on `stream` for each flag given that does nothing in this mode."""
    if getattr(args, "sample", False):
        return
    flags = [flag for name, flag in _SAMPLING_FLAGS if getattr(args, name, None) is not None]
    if getattr(args, "seed", None) is not None:
        flags.append("--seed")
    for flag in flags:
        print(
            f"warning: {flag} only acts when sampling: add --sample (unless the model's "
            "generation config samples), or drop it",
            file=stream,
        )


def load_from_arguments(args: argparse.Namespace, **fast: Any) -> tuple[Any, Any, Any]:
    """(target, draft, tokenizer) as the model flags (--pair/--target/--draft, --dtype,
    --threads, --no-draft) and `fast` (the fast path's options) ask for them."""
    loaded = load_named_from_arguments(args, **fast)
    return loaded.target, loaded.draft, loaded.tokenizer


def load_named_from_arguments(args: argparse.Namespace, **fast: Any) -> Any:
    """`models.loading.NamedModels` as the model flags ask for them; with --cross-tokenizer
    a --draft of another family keeps its own tokenizer (`draft_tokenizer`)."""
    from dynaspec.models.loading import load_model_set

    return load_model_set(
        args.pair,
        target=args.target,
        draft=args.draft,
        dtype=args.dtype,
        threads=args.threads,
        device=getattr(args, "device", None),
        with_draft=not getattr(args, "no_draft", False),
        other_tokenizer=getattr(args, "cross_tokenizer", False),
        **fast,
    )


def counts(text: str, flag: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4) for a flag that takes counts >= 1; ConfigError naming `flag`."""
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError as error:
        raise ConfigError(f"{flag} {text!r}: give counts such as 1,2,4,8") from error
    if not values or min(values) < 1:
        raise ConfigError(f"{flag} {text!r}: give counts >= 1, such as 1,2,4,8")
    return values
