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
   reported on stderr (after the prompt's last method) and classified (DESIGN.md,
   "Lossless in bf16: ties"): one target forward over the common prefix; if both differing
   tokens lie within ``--tie-steps`` steps of the dtype (its eps x 2**floor(log2|top|)) of
   the top logit, it is a numerical ``tie``, anything else a ``BUG``.
5. One JSONL record per (prompt, method), written as it is measured; at the end the report
   (``bench_report.render_report``: table.md, plots) and a summary on stdout. The exit
   status is 1 when a BUG-class mismatch occurred, else 0.

Methods (``METHODS``; ``--methods`` picks a subset, ``target`` is always run):
``target`` (dynaspec, draft=None), ``constant`` (k=5), ``heuristic`` (start 5, +2/-1),
``dynamic`` (20, confidence 0.4), ``adaptive`` (cost-aware, a fresh policy per prompt),
``adaptive-warm`` (one AdaptivePolicy reused over the whole run, so what it learned on a
prompt carries to the next; its warm-up uses a separate object), ``oracle`` (drafts up to
the first disagreement with the target-alone output: the best any lookahead policy can do
with this draft), ``hf-target`` (transformers greedy, no assistant), ``hf-heuristic`` and
``hf-dynamic`` (transformers' assisted generation, see ``dynaspec.eval.hf_peer``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shlex
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from dynaspec.errors import ConfigError
from dynaspec.eval.hf_peer import (
    HF_DYNAMIC,
    HF_HEURISTIC,
    HFAssistConfig,
    HFPeer,
    sklearn_available,
)
from dynaspec.eval.provenance import git_state, library_versions, machine_info
from dynaspec.generation import generate
from dynaspec.policies import OraclePolicy


@dataclass(frozen=True)
class MethodSpec:
    """One decoding method of the benchmark."""

    name: str  # as given to --methods and written in the records
    family: str  # "dynaspec" | "hf"
    speculative: bool  # uses the draft (False: the target decodes alone)
    description: str  # one line for --help and the README


METHOD_SPECS: tuple[MethodSpec, ...] = (
    MethodSpec("target", "dynaspec", False, "dynaspec loop, target alone (the baseline)"),
    MethodSpec("constant", "dynaspec", True, "dynaspec, constant lookahead 5"),
    MethodSpec("heuristic", "dynaspec", True, "dynaspec, heuristic schedule (start 5, +2/-1)"),
    MethodSpec("dynamic", "dynaspec", True, "dynaspec, dynamic (up to 20, confidence 0.4)"),
    MethodSpec("adaptive", "dynaspec", True, "dynaspec, cost-aware adaptive, fresh per prompt"),
    MethodSpec(
        "adaptive-warm", "dynaspec", True, "dynaspec, adaptive, one policy over the whole run"
    ),
    MethodSpec("oracle", "dynaspec", True, "dynaspec, oracle lookahead (first disagreement)"),
    MethodSpec("hf-target", "hf", False, "transformers generate(), greedy, no assistant"),
    MethodSpec("hf-heuristic", "hf", True, "transformers assisted, heuristic (5, +2/-1)"),
    MethodSpec("hf-dynamic", "hf", True, "transformers assisted, default dynamic (20, 0.4)"),
)
METHODS: tuple[str, ...] = tuple(spec.name for spec in METHOD_SPECS)
BASELINE = "target"
ADAPTIVE_METHODS = ("adaptive", "adaptive-warm")
HF_ASSIST: dict[str, HFAssistConfig] = {"hf-heuristic": HF_HEURISTIC, "hf-dynamic": HF_DYNAMIC}
WARMUP_TOKENS = 8  # new tokens of each untimed warm-up generation
WARMUP_PROMPT_TOKENS = 32  # prompt tokens of the warm-up generations
DEFAULT_MAX_NEW_TOKENS = 128
DEFAULT_N = 10  # prompts per task
DEFAULT_TIE_STEPS = 4.0  # "within a few bf16 steps" of the top logit: a tie
SMOKE_MAX_NEW_TOKENS = 16
SMOKE_N = 1  # prompts per smoke task
SMOKE_PROMPTS: dict[str, tuple[str, ...]] = {  # task -> texts, byte-tokenized, no chat
    "smoke-short": ("Hello", "def f(x):", "The cat", "1, 2, 3,"),
    "smoke-long": (
        "Summarize: speculative decoding drafts tokens with a small model.",
        "Write a Python function that returns the n-th Fibonacci number.",
        "Explain why a fixed lookahead wastes work when acceptance varies.",
        "Once upon a time, in a land of tiny random language models,",
    ),
}


@dataclass(frozen=True)
class BenchPrompt:
    """A rendered benchmark prompt."""

    task: str  # task name (a table row)
    id: str  # unique within its task
    input_ids: torch.Tensor  # (1, T) int64


@dataclass(frozen=True)
class Divergence:
    """Where and why a method's greedy output left the target-alone output."""

    position: int  # index among the new tokens of the first difference
    target_token: int | None  # the target-alone output's token there (None: it had ended)
    method_token: int | None  # the method's token there (None: it had ended)
    top_token: int | None  # argmax of the target's logits over the common prefix
    top_logit: float | None  # its logit
    target_gap: float | None  # top_logit - logit of target_token
    method_gap: float | None  # top_logit - logit of method_token
    ulp: float | None  # one step of the model dtype at the top logit
    steps: float | None  # max(target_gap, method_gap) / ulp
    dtype: str  # the target's parameter dtype
    kind: str  # "tie" (within the tie steps) or "BUG"


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark run measures."""

    methods: tuple[str, ...] = METHODS  # in rotation order; "target" is always run first
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # fixed for every method and prompt
    warmup: bool = True  # one untimed short generation per method before timing
    tie_steps: float = DEFAULT_TIE_STEPS  # classification bound for a numerical tie
    progress: bool = True  # tqdm progress bar over prompts x methods


@dataclass
class BenchResult:
    """What run_benchmark() returns."""

    records: list[dict[str, Any]] = field(default_factory=list)  # one per (prompt, method)
    methods: tuple[str, ...] = ()  # methods actually run, in rotation order
    skipped: dict[str, str] = field(default_factory=dict)  # method -> reason

    @property
    def mismatches(self) -> list[dict[str, Any]]:
        return [record for record in self.records if not record["matches_target"]]


# ---- argument parsing -------------------------------------------------------------------


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `dynaspec bench` options to `parser`."""
    models = parser.add_argument_group("models")
    models.add_argument("--pair", help="pair preset name (default: qwen2.5-coder; 'tiny')")
    models.add_argument("--target", help="target model: preset name, folder, .gguf or hub id")
    models.add_argument("--draft", help="draft model (with --target)")
    models.add_argument(
        "--dtype", default=None, help="bfloat16 | float16 | float32 (default: the loader's)"
    )
    models.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads (default: all cores; 1 with --smoke)",
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
        help="summarization | open-ended | code | all (default: all)",
    )
    data.add_argument("--n", type=int, default=None, help=f"prompts per task (default {DEFAULT_N})")
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
        type=int,
        default=2000,
        help="cut summarization articles at this many characters (default 2000)",
    )
    run = parser.add_argument_group("run")
    run.add_argument(
        "--methods",
        default=",".join(METHODS),
        help=f"comma-separated subset of: {', '.join(METHODS)} (default: all)",
    )
    run.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"new tokens per generation (default {DEFAULT_MAX_NEW_TOKENS}; "
        f"--smoke: {SMOKE_MAX_NEW_TOKENS})",
    )
    run.add_argument(
        "--tie-steps",
        type=float,
        default=DEFAULT_TIE_STEPS,
        help="a mismatch within this many dtype steps of the top logit is a tie (default 4)",
    )
    run.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument(
        "--out",
        help="output folder (default: benchmarks/<pair>-<date>, e.g. "
        "benchmarks/smoke-<date> with --smoke)",
    )


def parse_methods(text: str) -> tuple[str, ...]:
    """'dynamic,hf-dynamic' -> ("dynamic", "hf-dynamic"); unknown names raise ConfigError."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in METHODS]
    if unknown:
        raise ConfigError(
            f"unknown method(s) {', '.join(map(repr, unknown))}: choose from {', '.join(METHODS)}"
        )
    if not names:
        raise ConfigError(f"--methods is empty: choose from {', '.join(METHODS)}")
    return tuple(dict.fromkeys(names))


# ---- the run ----------------------------------------------------------------------------


def run_bench(args: argparse.Namespace) -> int:
    """`dynaspec bench`: load, run, write results.jsonl, table.md, plots. Returns exit status."""
    from dynaspec.eval.bench.report import render_report

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
    )
    load_start = perf_counter()
    label, target_name, draft_name, target, draft, tokenizer = _load_models(args)
    load_time = perf_counter() - load_start
    prompts = _load_bench_prompts(args, tokenizer)
    date = _dt.datetime.now().strftime("%Y-%m-%d")
    out_dir = Path(args.out) if args.out else _default_out_dir(label, date)
    out_dir.mkdir(parents=True, exist_ok=True)
    command = command_line() or equivalent_command(args)
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
        eos_token_id=_eos_ids(target, tokenizer),
        pad_token_id=_pad_id(target, tokenizer),
        jsonl_path=jsonl_path,
    )
    markdown = render_report(jsonl_path, out_dir)
    print(markdown)
    print(summary_text(result, out_dir))
    bugs = [r for r in result.mismatches if (r.get("mismatch") or {}).get("kind") != "tie"]
    return 1 if bugs else 0


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
) -> BenchResult:
    """Runs every method of `config` on every prompt; returns (and writes) the records.

    `target` and `draft` are transformers models (the hf-* methods call their generate()).
    Each record is appended to `jsonl_path` (created afresh) as soon as it is complete.
    """
    if not prompts:
        raise ConfigError("no prompts to benchmark")
    methods, skipped = runnable_methods(config.methods)
    for name, reason in skipped.items():
        print(f"dynaspec bench: skipping {name}: {reason}", file=sys.stderr)
    runner = _MethodRunner(target, draft, config.max_new_tokens, eos_token_id, pad_token_id)
    dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
    result = BenchResult(methods=methods, skipped=skipped)
    out = None
    if jsonl_path is not None:
        Path(jsonl_path).parent.mkdir(parents=True, exist_ok=True)
        out = open(jsonl_path, "w", encoding="utf-8")  # noqa: SIM115 (closed in finally)
    try:
        if config.warmup:
            start = perf_counter()
            # A short head of the first prompt: warms every code path without paying a
            # long prefill per method (prefill is slow on CPUs without native bf16).
            runner.warm_up(prompts[0].input_ids[:, :WARMUP_PROMPT_TOKENS], methods)
            if run_info is not None:
                run_info["warmup_time_s"] = round(perf_counter() - start, 3)
        from tqdm.auto import tqdm

        bar = tqdm(
            total=len(prompts) * len(methods),
            desc="bench",
            unit="gen",
            disable=not config.progress,
            dynamic_ncols=True,
        )
        with bar:
            for index, prompt in enumerate(prompts):
                order = method_order(methods, index)
                by_method: dict[str, dict[str, Any]] = {}
                outputs: dict[str, list[int]] = {}
                for position, name in enumerate(order):
                    bar.set_postfix_str(f"{prompt.task}/{prompt.id} {name}", refresh=False)
                    load = _load_average()
                    measured = runner.run(name, prompt.input_ids, outputs.get(BASELINE, []))
                    outputs[name] = measured.pop("output_ids")
                    measured.update(task=prompt.task, prompt_id=prompt.id, method=name)
                    measured["order_in_prompt"] = position
                    measured["load_avg_1m"] = load
                    by_method[name] = measured
                    bar.update(1)
                reference = outputs[BASELINE]
                baseline_wall = by_method[BASELINE]["wall_time_s"]
                for name in methods:  # records in --methods order, whatever the run order
                    measured, output = by_method[name], outputs[name]
                    divergence = None
                    if output != reference:
                        divergence = classify_mismatch(
                            target, prompt.input_ids, reference, output, config.tie_steps, dtype
                        )
                        _warn_mismatch(prompt, name, divergence)
                    measured["matches_target"] = divergence is None
                    measured["mismatch"] = asdict(divergence) if divergence else None
                    measured["output_sha"] = output_digest(output)
                    if name == BASELINE or divergence is not None:
                        measured["output_ids"] = output  # kept for the reference and mismatches
                    measured["prompt_index"] = index
                    measured["prompt_tokens"] = int(prompt.input_ids.shape[1])
                    wall = measured["wall_time_s"]
                    measured["speedup_vs_target"] = baseline_wall / wall if wall else None
                    final = _ordered_record(measured, run_info)
                    result.records.append(final)
                    if out is not None:
                        out.write(json.dumps(final) + "\n")
                        out.flush()
    finally:
        if out is not None:
            out.close()
    return result


class _MethodRunner:
    """Runs one method on one prompt and measures it."""

    def __init__(
        self,
        target: Any,
        draft: Any,
        max_new_tokens: int,
        eos_token_id: int | list[int] | None,
        pad_token_id: int | None,
    ) -> None:
        self.target = target
        self.draft = draft
        self.max_new_tokens = max_new_tokens
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.peer = HFPeer(target, draft)
        self.warm_policy: Any = None

    def warm_up(self, input_ids: torch.Tensor, methods: Sequence[str]) -> None:
        """One short untimed generation per method (adaptive-warm on a throwaway policy)."""
        saved, self.max_new_tokens = self.max_new_tokens, min(WARMUP_TOKENS, self.max_new_tokens)
        try:
            reference = self.run(BASELINE, input_ids, [])["output_ids"]
            for name in methods:
                if name == "adaptive-warm":
                    self._measure_dynaspec(input_ids, policy=_new_adaptive_policy())
                elif name != BASELINE:
                    self.run(name, input_ids, reference)
        finally:
            self.max_new_tokens = saved

    def run(self, name: str, input_ids: torch.Tensor, reference: list[int]) -> dict[str, Any]:
        """Measurements of `name` on one prompt, with "output_ids" (the new tokens)."""
        if name == BASELINE:
            return self._measure_dynaspec(input_ids, draft=None)
        if name in ("constant", "heuristic"):
            return self._measure_dynaspec(
                input_ids, num_assistant_tokens=5, num_assistant_tokens_schedule=name
            )
        if name == "dynamic":
            return self._measure_dynaspec(
                input_ids,
                num_assistant_tokens=20,
                assistant_confidence_threshold=0.4,
                num_assistant_tokens_schedule="dynamic",
            )
        if name == "adaptive":
            return self._measure_dynaspec(
                input_ids, num_assistant_tokens=20, num_assistant_tokens_schedule="adaptive"
            )
        if name == "adaptive-warm":
            if self.warm_policy is None:
                self.warm_policy = _new_adaptive_policy()
            return self._measure_dynaspec(input_ids, policy=self.warm_policy)
        if name == "oracle":
            full_reference = input_ids[0].tolist() + list(reference)
            return self._measure_dynaspec(input_ids, policy=OraclePolicy(full_reference))
        if name == "hf-target":
            return self._measure_hf(input_ids, None)
        if name in HF_ASSIST:
            return self._measure_hf(input_ids, HF_ASSIST[name])
        raise ConfigError(f"unknown method {name!r}")

    def _measure_dynaspec(self, input_ids: torch.Tensor, **kwargs: Any) -> dict[str, Any]:
        draft = kwargs.pop("draft", self.draft)
        start = perf_counter()
        output = generate(
            self.target,
            draft,
            input_ids,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.eos_token_id,
            **kwargs,
        )
        wall = perf_counter() - start
        summary = output.stats.summary()
        rounds = output.stats.rounds
        return {
            "family": "dynaspec",
            "new_tokens": summary.new_tokens,
            "wall_time_s": wall,
            "tokens_per_s": summary.new_tokens / wall if wall > 0 else None,
            "rounds": summary.rounds,
            "accepted_per_round": [r.num_accepted for r in rounds],
            "drafted_per_round": [r.num_drafted for r in rounds],
            "mean_accepted_per_round": summary.mean_accepted_per_round,
            "acceptance_rate": summary.acceptance_rate,
            "draft_forwards": summary.draft_forwards,
            "target_forwards": summary.target_forwards,
            "draft_time_s": summary.draft_time_s,
            "target_time_s": summary.target_time_s,
            "other_time_s": summary.other_time_s,
            "inner_wall_time_s": summary.wall_time_s,
            "stop_reasons": dict(Counter(r.stop_reason for r in rounds)),
            "output_ids": output.sequences[0, self._lead(input_ids) :].tolist(),
        }

    def _lead(self, input_ids: torch.Tensor) -> int:
        """Tokens before the new ones in `sequences`: the prompt, or (encoder-decoder) the
        decoder start token."""
        return 1 if _is_encoder_decoder(self.target) else input_ids.shape[1]

    def _measure_hf(self, input_ids: torch.Tensor, assist: HFAssistConfig | None) -> dict[str, Any]:
        result = self.peer.generate(
            input_ids,
            max_new_tokens=self.max_new_tokens,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            assist=assist,
        )
        new_ids = result.sequences[0, self._lead(input_ids) :].tolist()
        wall = result.wall_time_s
        drafted = sum(result.drafted_per_round)
        accepted = sum(result.accepted_per_round)
        rounds = result.target_forwards
        return {
            "family": "hf",
            "new_tokens": len(new_ids),
            "wall_time_s": wall,
            "tokens_per_s": len(new_ids) / wall if wall > 0 else None,
            "rounds": rounds,
            "accepted_per_round": result.accepted_per_round,
            "drafted_per_round": result.drafted_per_round,
            "mean_accepted_per_round": (
                accepted / rounds if rounds and result.accepted_per_round else None
            ),
            "acceptance_rate": (
                accepted / drafted if drafted else (0.0 if result.drafted_per_round else None)
            ),
            "draft_forwards": result.draft_forwards,
            "target_forwards": result.target_forwards,
            "draft_time_s": None,
            "target_time_s": None,
            "other_time_s": None,
            "inner_wall_time_s": wall,
            "stop_reasons": None,
            "output_ids": new_ids,
        }


def _new_adaptive_policy() -> Any:
    from dynaspec.policies.adaptive import AdaptivePolicy

    policy = AdaptivePolicy(max_tokens=20)
    policy.reset()
    return policy


def method_order(methods: Sequence[str], prompt_index: int) -> list[str]:
    """The run order of `methods` on prompt number `prompt_index`.

    The list rotated left by `prompt_index` places (the baseline included, so no method
    always runs first, right after the previous prompt, or last), except that the oracle,
    which needs the target-alone output, is moved to run right after the baseline when the
    rotation put it before.
    """
    shift = prompt_index % len(methods) if methods else 0
    order = [*methods[shift:], *methods[:shift]]
    if "oracle" in order and BASELINE in order and order.index("oracle") < order.index(BASELINE):
        order.remove("oracle")
        order.insert(order.index(BASELINE) + 1, "oracle")
    return order


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def runnable_methods(
    methods: Sequence[str], adaptive_available: bool | None = None
) -> tuple[tuple[str, ...], dict[str, str]]:
    """(methods to run, "target" first; {skipped method: reason}).

    The adaptive methods are skipped, with a message, when `dynaspec.policies.adaptive` is not
    importable (`adaptive_available=None` looks it up).
    """
    if adaptive_available is None:
        adaptive_available = importlib.util.find_spec("dynaspec.policies.adaptive") is not None
    skipped: dict[str, str] = {}
    if not adaptive_available:
        for name in ADAPTIVE_METHODS:
            if name in methods:
                skipped[name] = "dynaspec.policies.adaptive (AdaptivePolicy) is not available yet"
    run = [BASELINE] + [name for name in methods if name != BASELINE and name not in skipped]
    return tuple(run), skipped


# ---- mismatch classification ------------------------------------------------------------


def first_difference(reference: Sequence[int], output: Sequence[int]) -> int | None:
    """Index of the first position where the two token lists differ (None: identical)."""
    for index, (a, b) in enumerate(zip(reference, output, strict=False)):
        if a != b:
            return index
    if len(reference) != len(output):
        return min(len(reference), len(output))
    return None


def dtype_step(value: float, dtype: torch.dtype) -> float:
    """One step (ulp) of `dtype` at magnitude |value|: eps * 2**floor(log2|value|)."""
    eps = torch.finfo(dtype).eps
    magnitude = max(abs(value), torch.finfo(dtype).tiny)
    return eps * 2.0 ** math.floor(math.log2(magnitude))


def classify_logits(
    logits: torch.Tensor,
    position: int,
    target_token: int | None,
    method_token: int | None,
    dtype: torch.dtype,
    tie_steps: float = DEFAULT_TIE_STEPS,
) -> Divergence:
    """Classifies a divergence from the target's logits (V,) at the first differing position.

    A tie: both differing tokens are within `tie_steps` steps of `dtype` (at the top logit)
    of the top logit, so the argmax can flip with the last bit of a forward that batches a
    different number of tokens. Otherwise (a token far from the top, or one output simply
    ended or went on where the other did not) a BUG.
    """
    name = str(dtype).removeprefix("torch.")
    if target_token is None or method_token is None:
        return Divergence(
            position, target_token, method_token, None, None, None, None, None, None, name, "BUG"
        )
    values = logits.float()
    top_token = int(values.argmax())
    top_logit = float(values[top_token])
    target_gap = top_logit - float(values[target_token])
    method_gap = top_logit - float(values[method_token])
    ulp = dtype_step(top_logit, dtype)
    steps = max(target_gap, method_gap) / ulp
    kind = "tie" if steps <= tie_steps else "BUG"
    return Divergence(
        position,
        target_token,
        method_token,
        top_token,
        top_logit,
        target_gap,
        method_gap,
        ulp,
        steps,
        name,
        kind,
    )


def _is_encoder_decoder(model: Any) -> bool:
    return bool(getattr(model.config, "is_encoder_decoder", False))


def classify_mismatch(
    target: Any,
    input_ids: torch.Tensor,
    reference: Sequence[int],
    output: Sequence[int],
    tie_steps: float = DEFAULT_TIE_STEPS,
    dtype: str | None = None,
) -> Divergence:
    """One target forward over prompt + common prefix; classify_logits() at the divergence."""
    position = first_difference(reference, output)
    if position is None:
        raise ValueError("the outputs are identical: nothing to classify")
    torch_dtype = getattr(torch, dtype) if dtype else next(target.parameters()).dtype
    target_token = reference[position] if position < len(reference) else None
    method_token = output[position] if position < len(output) else None
    device = next(target.parameters()).device
    common = torch.tensor(list(reference[:position]), dtype=torch.long)
    with torch.inference_mode():
        if _is_encoder_decoder(target):
            start = torch.tensor([target.generation_config.decoder_start_token_id])
            decoder = torch.cat([start, common]).to(device)
            logits = target(input_ids=input_ids.to(device), decoder_input_ids=decoder[None])
        else:
            prefix = torch.cat([input_ids[0].cpu(), common]).to(device)
            logits = target(input_ids=prefix[None])
        logits = logits.logits[0, -1]  # (V,)
    return classify_logits(logits, position, target_token, method_token, torch_dtype, tie_steps)


def _warn_mismatch(prompt: BenchPrompt, method: str, divergence: Divergence) -> None:
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


# ---- records and metadata ---------------------------------------------------------------

_RECORD_ORDER = (
    "task", "prompt_id", "prompt_index", "prompt_tokens", "method", "family",
    "order_in_prompt", "load_avg_1m", "new_tokens", "wall_time_s", "tokens_per_s",
    "speedup_vs_target",
    "matches_target", "mismatch", "rounds", "mean_accepted_per_round", "acceptance_rate",
    "draft_forwards", "target_forwards", "draft_time_s", "target_time_s", "other_time_s",
    "inner_wall_time_s", "stop_reasons", "accepted_per_round", "drafted_per_round",
)  # fmt: skip


def _ordered_record(record: dict[str, Any], run_info: dict[str, Any] | None) -> dict[str, Any]:
    ordered = {key: record[key] for key in _RECORD_ORDER if key in record}
    ordered.update({key: value for key, value in record.items() if key not in ordered})
    if "output_ids" in ordered:  # kept for the baseline and mismatches only: at the end
        ordered["output_ids"] = ordered.pop("output_ids")
    ordered["run"] = run_info or {}
    return ordered


def run_metadata(
    *,
    args: argparse.Namespace | None,
    config: BenchConfig,
    label: str,
    target_name: str,
    draft_name: str,
    target: Any,
    command: str,
    num_prompts: int,
) -> dict[str, Any]:
    """Config, library versions, machine and git state: the "run" field of every record."""
    dtype = str(next(target.parameters()).dtype).removeprefix("torch.")
    arguments = {k: v for k, v in vars(args).items() if not callable(v)} if args else {}
    return {
        "pair": label,
        "target": target_name,
        "draft": draft_name,
        "started_at": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command,
        "config": {
            **asdict(config),
            "methods": list(config.methods),
            "dtype": dtype,
            "num_prompts": num_prompts,
            "warmup_tokens": WARMUP_TOKENS,
            "arguments": arguments,
        },
        "versions": library_versions(),
        "sklearn_available": sklearn_available(),
        "machine": machine_info(),
        "git": git_state(),
    }


# ---- loading ----------------------------------------------------------------------------


def _load_models(args: argparse.Namespace) -> tuple[str, str, str, Any, Any, Any]:
    """(label, target name, draft name, target, draft, tokenizer)."""
    if args.smoke or args.pair == "tiny":
        from dynaspec.models.tiny import tiny_pair

        # tiny models are all per-op overhead: one thread is fastest (several times, on a
        # loaded 2-core machine)
        torch.set_num_threads(args.threads or 1)
        target, draft, tokenizer = tiny_pair()
        if args.dtype:
            from dynaspec.models.loading import resolve_dtype

            dtype = resolve_dtype(args.dtype, none_means=torch.float32)
            target, draft = target.to(dtype), draft.to(dtype)
        label = "smoke" if args.smoke else "tiny"
        return label, "tiny-llama (random)", "tiny-llama (perturbed copy)", target, draft, tokenizer
    from dynaspec.models import loading

    kwargs: dict[str, Any] = {"threads": args.threads}
    if args.dtype:
        kwargs["dtype"] = args.dtype
    if args.target:
        target, tokenizer = loading.load_model(args.target, **kwargs)
        draft, _ = loading.load_model(args.draft, **kwargs)
        label = f"{_short_name(args.target)}+{_short_name(args.draft)}"
        return label, str(args.target), str(args.draft), target, draft, tokenizer
    pair = loading.load_pair(args.pair, **kwargs)
    from dynaspec.models.presets import get_pair_preset

    preset = get_pair_preset(pair.name)
    return pair.name, preset.target, preset.draft, pair.target, pair.draft, pair.tokenizer


def _short_name(name: str) -> str:
    return Path(str(name).rstrip("/")).name.removesuffix(".gguf") or str(name)


def _load_bench_prompts(args: argparse.Namespace, tokenizer: Any) -> list[BenchPrompt]:
    from dynaspec.eval import data

    if args.smoke:
        n = args.n or SMOKE_N
        return [
            BenchPrompt(task, str(index), tokenizer(text, return_tensors="pt").input_ids)
            for task, texts in SMOKE_PROMPTS.items()
            for index, text in enumerate(texts[:n])
        ]
    if args.prompts:
        prompts = data.load_prompt_file(args.prompts)
        if args.n:
            prompts = prompts[: args.n]
    else:
        prompts = data.load_prompts(
            args.task, args.n or DEFAULT_N, args.seed, max_prompt_chars=args.max_prompt_chars
        )
    chat = {"yes": True, "no": False}.get(args.chat, data.should_use_chat(tokenizer))
    return [
        BenchPrompt(p.task, p.id, data.render_prompt(tokenizer, p.text, chat=chat)) for p in prompts
    ]


def _eos_ids(target: Any, tokenizer: Any) -> int | list[int] | None:
    eos = getattr(getattr(target, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(tokenizer, "eos_token_id", None)
    return eos


def _pad_id(target: Any, tokenizer: Any) -> int | None:
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = getattr(getattr(target, "generation_config", None), "pad_token_id", None)
    if pad is None:
        eos = _eos_ids(target, tokenizer)
        pad = eos[0] if isinstance(eos, list) and eos else eos
    return pad


def _default_out_dir(label: str, date: str) -> Path:
    safe = "".join(ch if ch.isalnum() or ch in "._+-" else "-" for ch in label)
    base = Path("benchmarks") / f"{safe}-{date}"
    if not (base / "results.jsonl").exists():
        return base
    stamp = _dt.datetime.now().strftime("%H%M%S")
    return Path("benchmarks") / f"{safe}-{date}-{stamp}"


def command_line(argv: Sequence[str] | None = None) -> str | None:
    """The command that started this process, when it is `dynaspec` or this module."""
    argv = list(sys.argv if argv is None else argv)
    program = Path(argv[0]).name if argv else ""
    if program == "dynaspec":
        return shlex.join(["dynaspec", *argv[1:]])
    if program == "bench.py":
        return shlex.join(["python", "-m", "dynaspec.eval.bench.run", *argv[1:]])
    return None


def equivalent_command(args: argparse.Namespace) -> str:
    """`dynaspec bench ...` with the options of `args` that differ from the defaults (for a
    run started from Python, whose process command line says nothing about the bench)."""
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    words = ["dynaspec", "bench"]
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if isinstance(action, argparse._StoreTrueAction):
            words.append(flag)
        else:
            words += [flag, str(value)]
    return shlex.join(words)


# ---- summary ----------------------------------------------------------------------------


def summary_text(result: BenchResult, out_dir: Path | None = None) -> str:
    """The end-of-run summary: per method medians and every mismatch."""
    lines = ["", "summary (median over prompts):"]
    for name in result.methods:
        rows = [r for r in result.records if r["method"] == name]
        if not rows:
            continue
        speedups = sorted(r["speedup_vs_target"] for r in rows if r["speedup_vs_target"])
        rates = sorted(r["tokens_per_s"] for r in rows if r["tokens_per_s"])
        bad = [r for r in rows if not r["matches_target"]]
        lines.append(
            f"  {name:<14} {_median(speedups):5.2f}x  {_median(rates):7.1f} tok/s"
            f"  mismatches {len(bad)}/{len(rows)}"
        )
    for name, reason in result.skipped.items():
        lines.append(f"  {name:<14} skipped: {reason}")
    mismatches = result.mismatches
    kinds = Counter((r["mismatch"] or {}).get("kind", "BUG") for r in mismatches)
    lines.append(
        f"mismatches: {len(mismatches)} ({kinds.get('tie', 0)} tie, {kinds.get('BUG', 0)} BUG)"
    )
    for record in mismatches:
        info = record["mismatch"] or {}
        lines.append(
            f"  !!! {record['method']} {record['task']}/{record['prompt_id']}: "
            f"{info.get('kind')} at new token {info.get('position')}"
            + (f", {info['steps']:.1f} steps" if info.get("steps") is not None else "")
        )
    if out_dir is not None:
        lines.append(f"results: {out_dir}/results.jsonl, table: {out_dir}/table.md")
    return "\n".join(lines)


def _median(values: Sequence[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def output_digest(tokens: Sequence[int]) -> str:
    """Short sha256 of a token list (for comparing outputs across runs)."""
    return hashlib.sha256(json.dumps(list(tokens)).encode()).hexdigest()[:16]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m dynaspec.eval.bench.run ...` (the same options as `dynaspec bench`)."""
    parser = argparse.ArgumentParser(prog="dynaspec bench", description=__doc__.splitlines()[0])
    add_bench_arguments(parser)
    return run_bench(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
