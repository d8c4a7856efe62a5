"""`dynaspec serve`'s flags and its runner (the CLI calls these; the server's own modules
load only when it runs, so the CLI works without the `serve` extra)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from pathlib import Path

from dynaspec.compat.validation import CROSS_TOKENIZER_METHODS
from dynaspec.core.config import DEFAULT_SCHEDULE, SpecConfig
from dynaspec.drafters.suffix_cache import DEFAULT_SIZE_MB
from dynaspec.errors import DynaspecError, MissingDependencyError
from dynaspec.models.arguments import (
    add_fast_arguments,
    add_model_arguments,
    apply_fast_choice,
    check_model_arguments,
    describe_fast,
    fast_choice_line,
    fast_options,
    float_in,
    int_at_least,
    load_named_from_arguments,
)
from dynaspec.policies import SCHEDULES
from dynaspec.serve.config import SCOPES

LOOPBACK = ("127.0.0.1", "localhost", "::1")
SERVER_MODULES = ("fastapi", "uvicorn", "prometheus_client")  # the `serve` extra


def add_serve_arguments(p: argparse.ArgumentParser) -> None:
    add_model_arguments(p, float32_case="the tiny pair")
    add_fast_arguments(p, auto=True)
    p.add_argument("--no-draft", action="store_true", help="serve the target alone")
    p.add_argument(
        "--cross-tokenizer",
        action="store_true",
        help="a --draft of another model family keeps its own tokenizer and drafts for "
        "every request by --cross-tokenizer-method (one draft forward per row); lossless",
    )
    p.add_argument(
        "--cross-tokenizer-method",
        choices=CROSS_TOKENIZER_METHODS,
        default="auto",
        help="with --cross-tokenizer: 'string' drafts through text (greedy requests only; "
        "a sampled one is refused with a 400), 'intersection' over the tokens both "
        "tokenizers share (greedy or sampled); 'auto' (default): string",
    )
    p.add_argument("--schedule", default=DEFAULT_SCHEDULE, choices=tuple(SCHEDULES))
    p.add_argument("--num-assistant-tokens", type=int_at_least(1), default=20)
    p.add_argument("--threshold", type=float_in(0.0, 1.0), default=0.4)
    p.add_argument(
        "--prompt-lookup",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="also draft by prompt lookup, up to N tokens a round (32 is safe with adaptive)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (loopback)")
    p.add_argument("--port", type=int_at_least(0), default=8000)
    p.add_argument(
        "--max-batch", type=int_at_least(1), default=4, help="requests generated together"
    )
    p.add_argument(
        "--max-queue",
        type=int_at_least(0),
        default=16,
        help="requests that may wait for a place in the batch; beyond, 429 with Retry-After",
    )
    p.add_argument(
        "--prefill-chunk",
        type=int_at_least(0),
        default=256,
        help="prompt tokens of a joining request prefilled between two rounds while others "
        "are generating (chunked prefill, so a long prompt does not stall them); 0: the whole "
        "prompt at once",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("DYNASPEC_API_KEY"),
        help="require 'Authorization: Bearer KEY' on every endpoint but /health "
        "(default: $DYNASPEC_API_KEY; none: no key)",
    )
    p.add_argument(
        "--suffix-cache",
        type=float_in(0.0, math.inf),
        default=DEFAULT_SIZE_MB,
        metavar="MB",
        help="memory of the suffix cache, which drafts from the text of earlier requests "
        "(least recently used scopes go first); 0 turns it off (default %(default)g)",
    )
    p.add_argument(
        "--suffix-scope",
        choices=SCOPES,
        default="key",
        help="whose earlier text a request drafts from: the API key it presents (key, the "
        "default), that key and the request's `user` field (user), or every request's "
        "(shared): a draft's speed tells a client what others wrote (docs/serve.md)",
    )
    p.add_argument("--served-model-name", help="the model name clients send (default: the pair)")
    p.add_argument("--default-max-tokens", type=int_at_least(1), default=256)
    p.add_argument("--max-tokens-limit", type=int_at_least(1), default=4096)
    p.add_argument("--max-body-bytes", type=int_at_least(1024), default=1 << 20)
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info"))
    p.set_defaults(func=run_serve, check=lambda args: check_serve_arguments(p, args))


def check_serve_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    check_model_arguments(parser, args)
    check_decoding_arguments(parser, args)
    if args.cross_tokenizer and (args.target is None or args.draft is None):
        parser.error("--cross-tokenizer acts on --target and --draft: name both models")
    if args.cross_tokenizer_method != "auto" and not args.cross_tokenizer:
        parser.error("--cross-tokenizer-method acts with --cross-tokenizer: add it")
    if args.host not in LOOPBACK and not args.api_key:
        print(
            f"warning: listening on {args.host} without --api-key: anyone who can reach this "
            "address can use the server",
            file=sys.stderr,
        )


def check_decoding_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--no-draft against --draft, --compile (the server batches), and the schedule's
    settings (SpecConfig's checks)."""
    if args.no_draft and args.draft is not None:
        parser.error("--no-draft and --draft contradict each other: drop one")
    if args.compile:
        parser.error(
            "--compile decodes one sequence at a time and a server batches its requests: "
            "drop --compile (--static and --quantize run in batches)"
        )
    try:
        spec(args)
    except DynaspecError as error:
        parser.error(error.for_cli())


def spec(args: argparse.Namespace) -> SpecConfig:
    return SpecConfig(
        num_assistant_tokens=args.num_assistant_tokens,
        assistant_confidence_threshold=args.threshold,
        num_assistant_tokens_schedule=args.schedule,
    )


def model_name(args: argparse.Namespace) -> str:
    if getattr(args, "served_model_name", None):
        return args.served_model_name
    return args.pair if args.target is None else Path(args.target).name


def require(*modules: str) -> None:
    """MissingDependencyError naming the install command when a module is missing."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingDependencyError(
            f'this command needs {", ".join(missing)}: pip install -e ".[serve]" '
            f"(or pip install {' '.join(missing)})"
        )


def run_serve(args: argparse.Namespace) -> int:
    require(*SERVER_MODULES)
    from dynaspec.serve.config import ServeConfig
    from dynaspec.serve.engine import on_passing_thread
    from dynaspec.serve.run import build_app, serve

    config = ServeConfig(
        model_name=model_name(args),
        host=args.host,
        port=args.port,
        max_batch=args.max_batch,
        max_queue=args.max_queue,
        prefill_chunk=args.prefill_chunk or None,
        api_key=args.api_key or None,
        max_body_bytes=args.max_body_bytes,
        default_max_tokens=args.default_max_tokens,
        max_tokens_limit=args.max_tokens_limit,
        suffix_cache_mb=args.suffix_cache,
        suffix_scope=args.suffix_scope,
    )
    choice = apply_fast_choice(args)  # --fast auto: chosen for this machine
    if choice is not None:
        print(fast_choice_line(choice, args), file=sys.stderr, flush=True)
    # loaded on a thread that ends here: the engine thread's OpenMP workers are the only ones
    models = on_passing_thread(lambda: load_named_from_arguments(args, **fast_options(args)))
    app = build_app(
        models.target,
        models.draft,
        models.tokenizer,
        config,
        spec(args),
        args.prompt_lookup,
        draft_tokenizer=models.draft_tokenizer,
        cross_tokenizer=args.cross_tokenizer_method,
    )
    draft = models.draft
    how = "the target alone" if draft is None else f"speculative, schedule {args.schedule}"
    print(
        f"dynaspec serve: model {config.model_name!r} ({how}) on "
        f"http://{args.host}:{args.port}/v1; max batch {args.max_batch}" + describe_fast(args),
        file=sys.stderr,
        flush=True,
    )
    serve(app, config, log_level=args.log_level)
    return 0
