"""`dynaspec devicecheck`: correctness and costs on a GPU, in one short run.

1. the test suites marked `cuda` (`cuda_tests`);
2. for each target/draft pair of real shapes (`shapes.GPU_PAIRS`), random-weight models built
   in bf16 directly on the GPU;
3. per pair: T(n) for n = 1..32 after a prefix, the draft's time per token and both prefills
   (`dynaspec.eval.cost_model.measure_costs`, every time read after the device finished), and
   the per-round overhead of dynaspec and of transformers' assisted generation (`overhead`);
   eager, and compiled when the fast path exists (`compiled`);
4. one JSON and a markdown summary, rewritten after every step so a run cut short still
   leaves its data.

`--budget-s` bounds the run: work that would start after the budget is skipped and said so.
`--dry-run` runs the same code on the CPU with tiny models of the same architectures.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import gc
import json
import math
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from dynaspec.errors import ConfigError
from dynaspec.eval.cost_model import measure_costs
from dynaspec.eval.devicecheck.compiled import compiled_variant
from dynaspec.eval.devicecheck.cuda_tests import run_cuda_tests
from dynaspec.eval.devicecheck.graphs import graph_variant
from dynaspec.eval.devicecheck.overhead import dynaspec_run, overhead, transformers_run
from dynaspec.eval.devicecheck.report import render_markdown
from dynaspec.eval.devicecheck.shapes import DRY_RUN_PAIRS, GPU_PAIRS, PairShape, build_model
from dynaspec.eval.hf_peer import HFPeer
from dynaspec.eval.provenance import command_line, git_state, library_versions, machine_info
from dynaspec.models.arguments import float_in

JSON_NAME = "devicecheck.json"
MARKDOWN_NAME = "devicecheck.md"
TESTS_OUTPUT_NAME = "cuda_tests.txt"


@dataclass(frozen=True)
class CheckSettings:
    """What the device check measures, and how long it may take."""

    device: str  # "cuda" (the GPU check) or "cpu" (--dry-run)
    dtype: str  # weights dtype: "bfloat16"
    prefix_tokens: int  # cached context before every timed forward (~ a real prompt)
    max_verify_tokens: int  # T(n) is measured for n = 1..this
    cost_reps: int  # repetitions per T(n) point (median)
    lookahead: int  # k of the constant schedule in the overhead runs
    short_rounds: int  # rounds of the short overhead call
    long_rounds: int  # rounds of the long overhead call
    overhead_reps: int  # (short, long) call pairs per method (median of the slopes)
    budget_s: float  # whole run; later work is skipped once it is spent
    tests_timeout_s: float  # the cuda test step at most

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def settings_for(dry_run: bool, budget_s: float) -> CheckSettings:
    """The GPU run's settings, or the dry run's (fewer repetitions, same code paths)."""
    return CheckSettings(
        device="cpu" if dry_run else "cuda",
        dtype="bfloat16",
        prefix_tokens=200,
        max_verify_tokens=32,
        cost_reps=1 if dry_run else 4,
        lookahead=4,
        short_rounds=1 if dry_run else 3,
        long_rounds=3 if dry_run else 12,
        overhead_reps=1 if dry_run else 2,
        budget_s=budget_s,
        tests_timeout_s=min(120.0, 0.45 * budget_s),
    )


class Progress:
    """Elapsed time, the budget left, and timestamped progress lines on stdout."""

    def __init__(self, budget_s: float) -> None:
        self.start = perf_counter()
        self.budget_s = budget_s

    def elapsed(self) -> float:
        return perf_counter() - self.start

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def log(self, message: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {message}", flush=True)


def add_devicecheck_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="folder for devicecheck.json and .md")
    parser.add_argument(
        "--budget-s",
        type=float_in(0.0, math.inf, low_open=True),
        default=240.0,
        help="skip the work left once this many seconds have passed (default 240)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="run the same code on the CPU with tiny models (no GPU needed)",
    )
    parser.add_argument(
        "--skip-tests", action="store_true", help="do not run the tests marked cuda"
    )
    parser.add_argument(
        "--skip-graphs",
        action="store_true",
        help="do not measure the static path with CUDA graphs (measured by default, first)",
    )
    parser.add_argument(
        "--skip-eager",
        action="store_true",
        help="do not measure the eager transformers models (T(n) and the overheads of both "
        "libraries): the graph path alone",
    )
    parser.add_argument(
        "--compiled",
        action="store_true",
        help="also measure the compiled fast path on the smallest pair, last (compiling "
        "takes a minute or more)",
    )


def run_devicecheck(args: argparse.Namespace) -> int:
    if not args.dry_run and not torch.cuda.is_available():
        raise ConfigError(
            "devicecheck needs a CUDA GPU and torch sees none (torch.cuda.is_available() is "
            "False): run it on a GPU machine, or pass --dry-run to try it on the CPU"
        )
    progress = Progress(args.budget_s)
    settings = settings_for(args.dry_run, args.budget_s)
    if args.dry_run:  # tiny models are per-op bound: one thread is fastest on a busy CPU
        torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = _new_record(settings, args.dry_run)
    progress.log(f"devicecheck on {record['provenance']['device_name']}; writing to {out}")
    _write(out, record, progress)
    if args.skip_tests:
        record["tests"] = {"outcome": "not run", "reason": "--skip-tests"}
    else:
        progress.log(f"step 1: pytest -m cuda (at most {settings.tests_timeout_s:.0f} s)")
        record["tests"] = run_cuda_tests(settings.tests_timeout_s, out / TESTS_OUTPUT_NAME)
        progress.log(f"tests: {record['tests']['outcome']} ({record['tests'].get('summary')})")
    _write(out, record, progress)
    pairs = DRY_RUN_PAIRS if args.dry_run else GPU_PAIRS
    record["pairs"] = [{"name": p.name, **p.to_json(), "variants": {}, "notes": []} for p in pairs]
    phases = [("graphs", _graphs_of)] if not args.skip_graphs else []
    phases += [("eager", check_pair)] if not args.skip_eager else []
    for variant, measure in phases:
        _pair_phase(variant, measure, pairs, record, settings, progress, out)
    _compiled_phase(record, pairs, settings, progress, asked=args.compiled)
    _write(out, record, progress)
    progress.log(f"done in {progress.elapsed():.0f} s: {out / JSON_NAME}, {out / MARKDOWN_NAME}")
    return 0


def _pair_phase(
    variant: str,
    measure: Any,
    pairs: tuple[PairShape, ...],
    record: dict[str, Any],
    settings: CheckSettings,
    progress: Progress,
    out: Path,
) -> None:
    """`measure(pair, settings, progress, entry)` for every pair while the budget lasts,
    into the pair's entry of `record`; a failure is recorded and the next pair runs."""
    longest = 0.0
    for pair, entry in zip(pairs, record["pairs"], strict=True):
        if progress.left() < 1.2 * longest:
            record["skipped"].append(f"{pair.name}, {variant}: the time budget was spent")
            progress.log(f"skipping {pair.name} ({variant}): {progress.left():.0f} s left")
            continue
        started = progress.elapsed()
        try:
            measure(pair, settings, progress, entry)
        except Exception as error:  # noqa: BLE001 - one pair's failure must not end the run
            entry["variants"][variant] = {"error": _describe(error)}
            progress.log(f"{pair.name} ({variant}): FAILED: {_describe(error)}")
        _free(torch.device(settings.device))  # after the error (and its frames) are gone
        longest = max(longest, progress.elapsed() - started)
        _write(out, record, progress)


def _graphs_of(
    pair: PairShape, settings: CheckSettings, progress: Progress, record: dict[str, Any]
) -> None:
    """The graph variant of `pair` into its record (graphs.graph_variant)."""
    record["variants"]["graphs"] = graph_variant(pair, _prompt(pair, settings), settings, progress)


def check_pair(
    pair: PairShape,
    settings: CheckSettings,
    progress: Progress,
    record: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Builds the pair, measures its eager costs and overheads into `record` (a new one
    when None), frees it; returns the record."""
    if record is None:
        record = {"name": pair.name, **pair.to_json(), "variants": {}, "notes": []}
    started = progress.elapsed()
    device, dtype = torch.device(settings.device), getattr(torch, settings.dtype)
    progress.log(f"{pair.name}: building {pair.target.name} and {pair.draft.name} on {device}")
    target = build_model(pair.target, device, dtype, seed=0)
    draft = build_model(pair.draft, device, dtype, seed=1)
    prompt = _prompt(pair, settings)
    progress.log(f"{pair.name}: T(1..{settings.max_verify_tokens}), draft per token, prefills")
    costs = measure_costs(
        target, draft, prompt, max_tokens=settings.max_verify_tokens, reps=settings.cost_reps
    )
    eager: dict[str, Any] = {"costs": costs.to_json()}
    record["variants"]["eager"] = eager
    del draft
    _free(device)
    if progress.left() <= 0:
        record["notes"].append("overheads not measured: the time budget was spent")
    else:
        twin = copy.deepcopy(target)  # the target as its own draft, as a separate module
        eager["overhead"] = measure_overheads(target, twin, prompt, settings, progress)
        del twin
    del target
    _free(device)
    record["seconds"] = round(progress.elapsed() - started, 1)
    progress.log(f"{pair.name}: done in {record['seconds']} s")
    return record


def _prompt(pair: PairShape, settings: CheckSettings) -> torch.Tensor:
    """(1, prefix_tokens) random token ids both models know, the same on every call."""
    vocab = min(pair.target.vocab_size, pair.draft.vocab_size)
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab, (1, settings.prefix_tokens), generator=generator)


def _compiled_phase(
    record: dict[str, Any],
    pairs: tuple[PairShape, ...],
    settings: CheckSettings,
    progress: Progress,
    asked: bool = True,
) -> None:
    """With `asked`, the compiled variant of the first pair measured eagerly (the smallest);
    the others are marked skipped (compiling costs tens of seconds per model)."""
    measured = [p for p in record["pairs"] if "costs" in p["variants"].get("eager", {})]
    for pair_record in record["pairs"]:
        why = f"compiled on {measured[0]['name']} only" if measured else "no eager data"
        pair_record["variants"]["compiled"] = {"skipped": why if asked else "no --compiled"}
    if not measured or not asked:
        return
    pair = next(p for p in pairs if p.name == measured[0]["name"])
    try:
        compiled = compiled_variant(pair, _prompt(pair, settings), settings, progress)
    except Exception as error:  # noqa: BLE001 - the eager numbers stand on their own
        compiled = {"error": _describe(error)}
        progress.log(f"{pair.name}: compiled variant FAILED: {_describe(error)}")
    measured[0]["variants"]["compiled"] = compiled
    _free(torch.device(settings.device))


def measure_overheads(
    target: Any, twin: Any, prompt: torch.Tensor, settings: CheckSettings, progress: Progress
) -> dict[str, Any]:
    """Per-round overhead of dynaspec and transformers, self-drafted and the target alone."""
    k = settings.lookahead
    short, long = settings.short_rounds * (k + 1), settings.long_rounds * (k + 1)
    assisted, alone = HFPeer(target, twin), HFPeer(target)
    methods = {
        "dynaspec": lambda n, hooked: dynaspec_run(target, twin, prompt, n, k, hooked),
        "transformers": lambda n, hooked: transformers_run(assisted, prompt, n, k, hooked),
        "dynaspec_target_alone": lambda n, hooked: dynaspec_run(target, None, prompt, n, k, hooked),
        "transformers_target_alone": lambda n, hooked: transformers_run(
            alone, prompt, n, k, hooked
        ),
    }
    results: dict[str, Any] = {"lookahead": k, "short_tokens": short, "long_tokens": long}
    for name, run in methods.items():
        if progress.left() <= 0:
            results[name] = {"skipped": "the time budget was spent"}
            continue
        try:
            results[name] = overhead(run, short, long, settings.overhead_reps).to_json()
        except Exception as error:  # noqa: BLE001 - recorded, and the other methods still run
            results[name] = {"error": _describe(error)}
            progress.log(f"  {name}: FAILED: {_describe(error)}")
            continue
        per_round = results[name]["per_round_s"] * 1e3
        progress.log(f"  {name}: {per_round:.2f} ms per round outside the forwards")
    return results


def _describe(error: BaseException) -> str:
    """The error and where it was raised (last frames), for the record."""
    frames = traceback.format_tb(error.__traceback__)[-3:]
    return f"{type(error).__name__}: {error} | " + " ".join(f.strip() for f in frames)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _new_record(settings: CheckSettings, dry_run: bool) -> dict[str, Any]:
    device_name = (
        torch.cuda.get_device_name(0) if torch.cuda.is_available() and not dry_run else "CPU"
    )
    return {
        "kind": "dynaspec devicecheck",
        "dry_run": dry_run,
        "command": command_line() or "dynaspec devicecheck",
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings.to_json(),
        "provenance": {
            "device_name": device_name,
            "versions": library_versions(),
            "machine": machine_info(),
            "git": git_state(),
        },
        "tests": None,
        "pairs": [],
        "skipped": [],
    }


def _write(out: Path, record: dict[str, Any], progress: Progress) -> None:
    record["elapsed_s"] = round(progress.elapsed(), 1)
    (out / JSON_NAME).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    (out / MARKDOWN_NAME).write_text(render_markdown(record), encoding="utf-8")
