"""`dynaspec bench`: every decoding method on the same prompts, side by side, as records.

Reproduces the table of Mamou et al. 2024 ("Dynamic Speculation Lookahead Accelerates
Speculative Decoding of Large Language Models": speedup of the heuristic and dynamic
schedules over the target alone, per task) for any target/draft pair on this machine, with
more columns: a constant lookahead, the cost-aware adaptive policy (cold and warm), the
oracle lookahead, and transformers' own assisted generation as peers.

How a run goes
--------------
1. Load the pair (``--pair``, ``--target/--draft``, or the tiny built-in pair of
   ``--smoke``), the prompts (``--task``/``--n``/``--seed`` or ``--prompts FILE``), and
   render every prompt once (chat template for instruct models).
2. Warm-up, not timed: one short generation (8 new tokens) per method on the first prompt.
3. For every prompt, every method, interleaved: the order of ``--methods`` rotated by one
   place per prompt (``method_order``; the baseline rotates too, so no method always runs
   first or last in a prompt), except that the oracle, which needs the target-alone output,
   runs right after the baseline when the rotation put it before. Each call is timed from
   outside with one clock (``perf_counter`` around the whole call), the same for dynaspec
   and transformers; the 1-minute load average before each call is recorded.
4. Every output is compared token for token with the target-alone output. A difference is
   reported on stderr (after the prompt's last method) and classified
   (``dynaspec.mismatch``; docs/design/architecture.md ("Lossless in bf16: ties")): one target
   forward over the common prefix; if both differing tokens lie within ``--tie-steps`` steps
   of the dtype (its eps x 2**floor(log2|top|)) of the top logit, it is a numerical ``tie``,
   anything else a ``BUG``.
5. One JSONL record per (prompt, method), written as it is measured; at the end the report
   (``dynaspec.eval.bench.report.render_report``: table.md, plots) and a summary on
   stdout. The exit status is 1 when a BUG-class mismatch occurred, else 0.

Methods: ``dynaspec.eval.bench.methods`` (``--methods`` picks a subset, ``target`` is always
run). Options: ``dynaspec.eval.bench.args``; records and the summary:
``dynaspec.eval.bench.records``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from time import perf_counter
from typing import Any, TextIO

import torch

from dynaspec.compat.settings import pad_token_id
from dynaspec.errors import ConfigError
from dynaspec.eval import data, provenance
from dynaspec.eval.bench.args import (
    DEFAULT_MAX_NEW_TOKENS,
    DEFAULT_N,
    SMOKE_MAX_NEW_TOKENS,
    SMOKE_N,
    SMOKE_NOTE,
    add_bench_arguments,
    equivalent_command,
)
from dynaspec.eval.bench.methods import (
    BASELINE,
    PEER_FAMILIES,
    SPECS,
    WARMUP_PROMPT_TOKENS,
    method_order,
    parse_methods,
    reference_model,
    run_method,
    runnable_methods,
    warm_up,
)
from dynaspec.eval.bench.prompt_record import Measured, prompt_record
from dynaspec.eval.bench.record import BenchRecord
from dynaspec.eval.bench.records import (
    BenchConfig,
    BenchPrompt,
    BenchResult,
    run_metadata,
    summary_text,
)
from dynaspec.eval.bench.runner import MethodRunner
from dynaspec.eval.data import Prompt
from dynaspec.models.devices import use_cuda_graphs
from dynaspec.models.loading import eos_token_ids, load_models
from dynaspec.models.presets import DEFAULT_PAIR, get_pair_preset
from dynaspec.prompts import render_prompt, should_use_chat

SMOKE_PROMPTS: dict[str, tuple[str, ...]] = {  # task -> texts, byte-tokenized, no chat
    "smoke-short": ("Hello", "def f(x):", "The cat", "1, 2, 3,"),
    "smoke-long": (
        "Summarize: speculative decoding drafts tokens with a small model.",
        "Write a Python function that returns the n-th Fibonacci number.",
        "Explain why a fixed lookahead wastes work when acceptance varies.",
        "Once upon a time, in a land of tiny random language models,",
    ),
}


def run_bench(args: argparse.Namespace) -> int:
    """`dynaspec bench`: load, run, write results.jsonl, table.md, plots. Returns exit status."""
    from dynaspec.eval.bench.report import render_report

    if args.batch is not None:
        return _run_batch_bench(args)
    methods = parse_methods(args.methods)
    if args.smoke and (args.pair or args.target or args.draft or args.prompts):
        raise ConfigError(
            "--smoke uses the tiny built-in pair and prompts: drop --pair, "
            "--target, --draft and --prompts"
        )
    if bool(args.target) != bool(args.draft):
        raise ConfigError("give both --target and --draft, or neither (then --pair is used)")
    if args.pair and args.target:
        raise ConfigError("give either --pair or --target/--draft, not both")
    max_new_tokens = args.max_new_tokens or (
        SMOKE_MAX_NEW_TOKENS if args.smoke else DEFAULT_MAX_NEW_TOKENS
    )
    if max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens {max_new_tokens} must be at least 1")
    config = BenchConfig(
        methods=methods,
        max_new_tokens=max_new_tokens,
        warmup=not args.no_warmup,
        tie_steps=args.tie_steps,
        progress=not args.no_progress,
        repeat=args.repeat,
    )
    texts = _read_prompts(args)
    load_start = perf_counter()
    label, target_name, draft_name, target, draft, tokenizer = _load_models(args)
    load_time = perf_counter() - load_start
    prompts = _render_prompts(args, texts, tokenizer)
    date = _dt.datetime.now().strftime("%Y-%m-%d")
    out_dir = (
        Path(args.out) if args.out else _default_out_dir("speed", label, date, smoke=args.smoke)
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    command = provenance.command_line() or equivalent_command(args)
    run_info = run_metadata(
        args=args,
        config=config,
        label=label,
        target_name=target_name,
        draft_name=draft_name,
        target=target,
        command=command,
        num_prompts=len(prompts),
    )
    run_info["load_time_s"] = round(load_time, 3)
    (out_dir / "command.txt").write_text(f"{command}\n", encoding="utf-8")
    jsonl_path = out_dir / "results.jsonl"
    print(
        f"dynaspec bench: {label}, {len(prompts)} prompts x {len(methods)} methods, "
        f"{max_new_tokens} new tokens, dtype {run_info['config']['dtype']}, "
        f"{torch.get_num_threads()} threads -> {out_dir}",
        file=sys.stderr,
    )
    result = run_benchmark(
        target,
        draft,
        prompts,
        config,
        run_info=run_info,
        eos_token_id=list(eos_token_ids(target, tokenizer)) or None,
        pad_token_id=_pad_id(target, tokenizer),
        jsonl_path=jsonl_path,
        peers=_peers(args, methods, prompts, max_new_tokens, target, draft, run_info),
    )
    markdown = render_report(jsonl_path, out_dir)
    print(markdown)
    print(summary_text(result, out_dir))
    if args.smoke:
        print(SMOKE_NOTE)
    bugs = [r for r in result.mismatches if _is_bug(r)]
    return 1 if bugs else 0


def _is_bug(record: BenchRecord) -> bool:
    """A mismatch of dynaspec's that is not a numerical tie (another engine's never is)."""
    if record.measurement.family in PEER_FAMILIES:
        return False
    return record.mismatch is None or record.mismatch.kind != "tie"


def run_benchmark(
    target: Any,
    draft: Any,
    prompts: Sequence[BenchPrompt],
    config: BenchConfig,
    *,
    run_info: dict[str, Any] | None = None,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    jsonl_path: str | os.PathLike[str] | None = None,
    peers: dict[str, Any] | None = None,
) -> BenchResult:
    """Runs every method of `config` on every prompt; returns (and writes) the records.

    `target` and `draft` are transformers models (the hf-* methods call their generate()).
    `peers`: "fast" (FastModels), "llamacpp" and "llamacpp_lookup" (LlamaCppPeer) and
    "openvino" (OpenVinoPeers) for the methods that use them.
    Each record is appended to `jsonl_path` (created afresh) as soon as it is complete.
    """
    if not prompts:
        raise ConfigError("no prompts to benchmark")
    methods = runnable_methods(config.methods)
    runner = MethodRunner(target, draft, config.max_new_tokens, eos_token_id, pad_token_id)
    runner.fast = (peers or {}).get("fast")
    runner.llamacpp = (peers or {}).get("llamacpp")
    runner.llamacpp_lookup = (peers or {}).get("llamacpp_lookup")
    runner.openvino = (peers or {}).get("openvino")
    result = BenchResult(methods=methods)
    out = None
    if jsonl_path is not None:
        Path(jsonl_path).parent.mkdir(parents=True, exist_ok=True)
        out = open(jsonl_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in finally)
    try:
        if config.warmup:
            start = perf_counter()
            # A short head of the first prompt: warms every code path without paying a
            # long prefill per method (prefill is slow on CPUs without native bf16).
            warm_up(runner, prompts[0].input_ids[:, :WARMUP_PROMPT_TOKENS], methods)
            if run_info is not None:
                run_info["warmup_time_s"] = round(perf_counter() - start, 3)
        _run_prompts(runner, prompts, methods, config, run_info, result, out)
    finally:
        if out is not None:
            out.close()
    return result


def _run_prompts(
    runner: MethodRunner,
    prompts: Sequence[BenchPrompt],
    methods: tuple[str, ...],
    config: BenchConfig,
    run_info: dict[str, Any] | None,
    result: BenchResult,
    out: TextIO | None,
) -> None:
    """Every method on every prompt, in the rotated order; records appended to `result`."""
    from tqdm.auto import tqdm

    bar = tqdm(
        total=len(prompts) * len(methods) * config.repeat,
        desc="bench",
        unit="gen",
        disable=not config.progress,
        dynamic_ncols=True,
    )
    with bar:
        for index, prompt in enumerate(prompts):
            runs: dict[str, list[Measured]] = {name: [] for name in methods}
            for repeat in range(config.repeat):  # each repeat in the next rotation
                for position, name in enumerate(method_order(methods, index + repeat)):
                    bar.set_postfix_str(f"{prompt.task}/{prompt.id} {name}", refresh=False)
                    load = _load_average()
                    baseline = runs.get(BASELINE)
                    reference = baseline[0].output.output_ids if baseline else ()
                    output = run_method(runner, name, prompt.input_ids, reference)
                    runs[name].append(Measured(output, position, load))
                    bar.update(1)
            for name in methods:  # records in --methods order, whatever the run order
                record = prompt_record(
                    reference_model(runner, name), prompt, index, name, runs, config
                )
                record = replace(record, run=run_info or {})  # the run's, shared
                result.records.append(record)
                if out is not None:
                    out.write(json.dumps(record.to_json()) + "\n")
                    out.flush()


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _run_batch_bench(args: argparse.Namespace) -> int:
    """`dynaspec bench --batch SIZES` (eval/bench/batch.py)."""
    from dynaspec.eval.bench.batch import (
        DEFAULT_BATCH_METHODS,
        batch_table,
        parse_batch_methods,
        parse_batch_sizes,
        run_batch_bench,
    )
    from dynaspec.eval.bench.fast import FastModels
    from dynaspec.eval.bench.methods import DEFAULT_METHODS

    if args.repeat != 1:
        raise ConfigError(
            "--repeat times the per-prompt bench; with --batch, drop --repeat and run the "
            "command again for more runs"
        )
    sizes = parse_batch_sizes(args.batch)
    chosen = (
        args.methods
        if args.methods != ",".join(DEFAULT_METHODS)
        else ",".join(DEFAULT_BATCH_METHODS)
    )
    methods = parse_batch_methods(chosen)
    texts = _read_prompts(args)
    label, target_name, draft_name, target, draft, tokenizer = _load_models(args)
    prompts = [p.input_ids for p in _render_prompts(args, texts, tokenizer)]
    max_new = args.max_new_tokens or (
        SMOKE_MAX_NEW_TOKENS if args.smoke else DEFAULT_MAX_NEW_TOKENS
    )
    date = _dt.datetime.now().strftime("%Y-%m-%d")
    out_dir = Path(args.out) if args.out else _default_out_dir("batch", label, date)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = provenance.command_line() or equivalent_command(args)
    run = {
        "pair": label,
        "target": target_name,
        "draft": draft_name,
        "command": command,
        "started_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "dtype": str(next(target.parameters()).dtype).removeprefix("torch."),
        "threads": torch.get_num_threads(),
        "max_new_tokens": max_new,
        "machine": provenance.machine_info(),
        "versions": provenance.library_versions(),
        "git": provenance.git_state(),
    }
    setup = {
        "max_new_tokens": max_new,
        "eos": list(eos_token_ids(target, tokenizer)),
        "pad": _pad_id(target, tokenizer) or 0,
        "run": run,
        "warmup": not args.no_warmup,
        # the static methods' adapters, built on first use (eval/bench/fast.py)
        "fast": FastModels(
            target,
            draft,
            compile=False,
            max_length=max(p.shape[1] for p in prompts) + max_new,
            graphs=_graphs(args),
        ),
    }
    print(
        f"dynaspec bench --batch: {label}, {len(prompts)} prompts, sizes {sizes}, "
        f"methods {', '.join(methods)} -> {out_dir}",
        file=sys.stderr,
    )
    records = run_batch_bench(target, draft, prompts, sizes, methods, setup, out_dir)
    print(batch_table(records, methods, sizes))
    differ = [r for r in records if r.same_as_reference is False]
    return 1 if differ and run["dtype"] == "float32" else 0


# ---- loading ----------------------------------------------------------------------------


def _graphs(args: argparse.Namespace) -> bool:
    """Whether the fast methods replay CUDA graphs: --cuda-graphs, else on a CUDA device
    unless --no-cuda-graphs or --fast-compile."""
    compile = getattr(args, "fast_compile", False)
    asked = getattr(args, "cuda_graphs", None)
    return use_cuda_graphs(getattr(args, "device", None), asked, static=True, compile=compile)


def _load_models(args: argparse.Namespace) -> tuple[str, str, str, Any, Any, Any]:
    """(label, target name, draft name, target, draft, tokenizer)."""
    pair = "tiny" if args.smoke else args.pair
    target, draft, tokenizer = load_models(
        pair,
        target=args.target,
        draft=args.draft,
        dtype=args.dtype,
        threads=args.threads,
        device=getattr(args, "device", None),
    )
    if args.target:
        label = f"{_short_name(args.target)}+{_short_name(args.draft)}"
        return label, str(args.target), str(args.draft), target, draft, tokenizer
    if pair == "tiny":
        label = "smoke" if args.smoke else "tiny"
        return label, "tiny-llama (random)", "tiny-llama (perturbed copy)", target, draft, tokenizer
    preset = get_pair_preset(pair or DEFAULT_PAIR)
    return preset.name, preset.target, preset.draft, target, draft, tokenizer


def _peers(
    args: argparse.Namespace,
    methods: Sequence[str],
    prompts: Sequence[BenchPrompt],
    max_new_tokens: int,
    target: Any,
    draft: Any,
    run_info: dict[str, Any],
) -> dict[str, Any]:
    """The fast models, the llama.cpp models and the OpenVINO pipelines, when `methods` use
    them."""
    from dynaspec.eval.bench.fast import (
        FAST_METHODS,
        LLAMACPP,
        LLAMACPP_LOOKUP,
        LLAMACPP_LOOKUP_TOKENS,
        FastModels,
    )
    from dynaspec.eval.openvino_peer import OPENVINO_METHODS

    peers: dict[str, Any] = {}
    if any(SPECS[name].reference in FAST_METHODS or name in FAST_METHODS for name in methods):
        longest = max(int(p.input_ids.shape[1]) for p in prompts)
        peers["fast"] = FastModels(
            target,
            draft,
            compile=args.fast_compile,
            max_length=longest + max_new_tokens,
            draft_gguf=_draft_gguf(args, methods),
            graphs=_graphs(args),
        )
    if LLAMACPP in methods or LLAMACPP_LOOKUP in methods:
        from dynaspec.eval.llamacpp_peer import LlamaCppPeer

        gguf = _target_gguf(args)
        threads = torch.get_num_threads()
        if LLAMACPP in methods:
            peers["llamacpp"] = LlamaCppPeer(gguf, threads=threads)
        if LLAMACPP_LOOKUP in methods:
            lookup = LLAMACPP_LOOKUP_TOKENS
            peers["llamacpp_lookup"] = LlamaCppPeer(gguf, threads=threads, prompt_lookup=lookup)
            run_info["llamacpp_prompt_lookup"] = {"num_pred_tokens": lookup}
        run_info["llamacpp_gguf"] = str(gguf)
    if any(name in OPENVINO_METHODS for name in methods):
        peers["openvino"] = _openvino_peers(methods, target, draft, run_info)
    return peers


def _openvino_peers(
    methods: Sequence[str], target: Any, draft: Any, run_info: dict[str, Any]
) -> Any:
    """The OpenVINO pipelines, with every IR the run's methods need exported now (once,
    cached), so that no export falls inside a timed call."""
    from dynaspec.eval.openvino_peer import OPENVINO_METHODS, OpenVinoPeers

    peers = OpenVinoPeers(_model_folder(target), _model_folder(draft), torch.get_num_threads())
    for name in methods:
        if name in OPENVINO_METHODS:
            method = OPENVINO_METHODS[name]
            peers.ir("target", method.weights)
            if method.pipeline == "draft":
                peers.ir("draft", method.weights)
    run_info["openvino"] = peers.facts()
    return peers


def _model_folder(model: Any) -> Path | None:
    """The folder a transformers model was loaded from (None: no model), for the export."""
    if model is None:
        return None
    folder = Path(str(getattr(model, "name_or_path", "") or ""))
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"the openvino-* methods export the models' folders to OpenVINO IR, but this model "
            f"was not loaded from a folder ({str(folder)!r}): use --pair or --target/--draft "
            "with model folders, GGUFs or presets"
        )
    return folder


def _draft_gguf(args: argparse.Namespace, methods: Sequence[str]) -> Path | None:
    """The draft's GGUF when a method runs it with llama.cpp (else None): --draft itself,
    its preset's, or the pair's draft's (joined if needed)."""
    from dynaspec.eval.bench.fast import FAST_METHODS
    from dynaspec.models.llamacpp_draft import SAME, llamacpp_gguf

    if not any(name in FAST_METHODS and FAST_METHODS[name].draft == "llamacpp" for name in methods):
        return None
    return llamacpp_gguf(args.pair, args.target, args.draft, SAME, False)


def _target_gguf(args: argparse.Namespace) -> Path:
    """The target's GGUF: --target itself, or the pair's target preset (joined if needed)."""
    from dynaspec.models.llamacpp_draft import gguf_file

    return gguf_file(args.target or get_pair_preset(args.pair or DEFAULT_PAIR).target)


def _short_name(name: str) -> str:
    return Path(str(name).rstrip("/")).name.removesuffix(".gguf") or str(name)


def _read_prompts(args: argparse.Namespace) -> list[Prompt]:
    """The prompts' texts, read before any model loads (a bad --prompts file fails fast)."""
    if args.smoke:
        n = args.n or SMOKE_N
        return [
            Prompt(task, str(index), text)
            for task, texts in SMOKE_PROMPTS.items()
            for index, text in enumerate(texts[:n])
        ]
    if args.prompts:
        prompts = data.load_prompt_file(args.prompts)
        return prompts[: args.n] if args.n else prompts
    return data.load_prompts(
        args.task, args.n or DEFAULT_N, args.seed, max_prompt_chars=args.max_prompt_chars
    )


def _render_prompts(
    args: argparse.Namespace, prompts: list[Prompt], tokenizer: Any
) -> list[BenchPrompt]:
    """Token ids of every prompt: smoke prompts as plain text, others through the chat
    template when --chat says so."""
    if args.smoke:
        return [
            BenchPrompt(p.task, p.id, tokenizer(p.text, return_tensors="pt").input_ids)
            for p in prompts
        ]
    chat = {"yes": True, "no": False}.get(args.chat, should_use_chat(tokenizer))
    return [BenchPrompt(p.task, p.id, render_prompt(tokenizer, p.text, chat=chat)) for p in prompts]


def _pad_id(target: Any, tokenizer: Any) -> int | None:
    eos = tuple(eos_token_ids(target, tokenizer))
    return pad_token_id(target, tokenizer=tokenizer, eos_token_ids=eos)


def _default_out_dir(suite: str, label: str, date: str, *, smoke: bool = False) -> Path:
    """benchmarks/<suite>/<label>-<date> (a time added when taken; benchmarks/README.md: a
    suite's folders, which `dynaspec results` reads); a new temporary folder for a smoke run,
    which checks the code and measures nothing worth keeping in the work tree."""
    if smoke:
        return Path(tempfile.mkdtemp(prefix=f"dynaspec-smoke-{date}-"))
    safe = "".join(ch if ch.isalnum() or ch in "._+-" else "-" for ch in label)
    base = Path("benchmarks") / suite / f"{safe}-{date}"
    if not any(base.glob("*.jsonl")):
        return base
    stamp = _dt.datetime.now().strftime("%H%M%S")
    return Path("benchmarks") / suite / f"{safe}-{date}-{stamp}"


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m dynaspec.eval.bench.run ...` (the same options as `dynaspec bench`)."""
    parser = argparse.ArgumentParser(prog="dynaspec bench", description=__doc__.splitlines()[0])
    add_bench_arguments(parser)
    return run_bench(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
