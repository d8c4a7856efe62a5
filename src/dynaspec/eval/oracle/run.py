"""`dynaspec oracle`: measures every prompt (or takes it from an earlier run with --resume),
replays every policy on it, and writes the records, costs, summary, report and plots. How
the analysis works: dynaspec.eval.oracle."""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from dynaspec.errors import ConfigError, InputError
from dynaspec.eval.cost_model import CostProfile, measure_costs
from dynaspec.eval.oracle.args import (
    COSTS_FILE,
    DEFAULT_NEW_TOKENS,
    DEFAULT_PROMPTS,
    RECORDS_FILE,
    SMOKE_NEW_TOKENS,
    SMOKE_PROMPTS,
    add_oracle_arguments,
)
from dynaspec.eval.oracle.measure import measure_prompt
from dynaspec.eval.oracle.methods import default_policy_specs
from dynaspec.eval.oracle.plots import require_plotting
from dynaspec.eval.oracle.records import PromptAnalysis, PromptRecord
from dynaspec.eval.oracle.replay import analyze
from dynaspec.eval.oracle.report import write_report
from dynaspec.eval.oracle.summary import build_summary, read_bench_jsonl
from dynaspec.eval.provenance import (
    command_line,
    equivalent_command,
    git_state,
    library_versions,
    machine_info,
)
from dynaspec.models.loading import dtype_choice, dtype_name, eos_token_ids, load_models

T = TypeVar("T")


@dataclass(frozen=True)
class PromptInput:
    """A prompt ready to decode."""

    task: str
    prompt_id: str
    input_ids: torch.Tensor  # (1, T)


def run_oracle(args: argparse.Namespace) -> int:
    """`dynaspec oracle`: measures, replays, writes OUT/{records, costs, summary, report, plots}."""
    require_plotting()
    command = command_line() or equivalent_command("oracle", add_oracle_arguments, args)
    args = _resolve_defaults(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = _LazyModels(args)
    prompt_keys = _prompt_keys(args)
    setup = _setup(args)
    records = _load_records(out, args) if args.resume else {}
    stored = _load_costs(out, setup) if args.resume else None  # checks pair and dtype
    profile = None if args.remeasure_costs else stored
    records_path = out / RECORDS_FILE
    if not args.resume or not records_path.exists():
        records_path.write_text("")
    if profile is None:
        profile = _measure_costs(models, prompt_keys, args, out / COSTS_FILE, setup)
    analyses = _analyze_prompts(models, prompt_keys, records, profile, args, records_path)
    ordered = [analyses[key] for key in prompt_keys]
    bench = read_bench_jsonl(args.bench_jsonl) if args.bench_jsonl else None
    summary = build_summary(ordered, profile, _run_config(args, command), bench)
    paths = write_report(summary, ordered, out)
    for path in paths:
        print(path)
    return 0


def _resolve_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """A copy of `args` with --n and --max-new-tokens resolved (they depend on --smoke)."""
    args = argparse.Namespace(**vars(args))
    if args.n is None:
        args.n = SMOKE_PROMPTS if args.smoke else DEFAULT_PROMPTS
    if args.max_new_tokens is None:
        args.max_new_tokens = SMOKE_NEW_TOKENS if args.smoke else DEFAULT_NEW_TOKENS
    if args.out is None:
        smoke = tempfile.mkdtemp(prefix="dynaspec-oracle-smoke-") if args.smoke else None
        args.out = smoke or "benchmarks/oracle"
    if args.n < 1 or args.max_new_tokens < 1:
        raise ConfigError("--n and --max-new-tokens must be >= 1")
    return args


def _measure_costs(
    models: _LazyModels,
    prompt_keys: Sequence[tuple[str, str]],
    args: argparse.Namespace,
    path: Path,
    setup: dict[str, Any],
) -> CostProfile:
    """Measures the pair's costs on the first prompt and writes them to `path`."""
    prompts = models.prompts(prompt_keys[:1])
    target, draft = models.pair()
    profile = measure_costs(
        target, draft, prompts[0].input_ids, max_tokens=args.cost_max_n, reps=args.cost_reps
    )
    costs = {**profile.to_json(), "setup": setup}
    path.write_text(json.dumps(costs, indent=2) + "\n")
    return profile


def _analyze_prompts(
    models: _LazyModels,
    prompt_keys: Sequence[tuple[str, str]],
    records: dict[tuple[str, str], PromptRecord],
    profile: CostProfile,
    args: argparse.Namespace,
    records_path: Path,
) -> dict[tuple[str, str], PromptAnalysis]:
    """Replays every policy on every prompt; prompts not in `records` are measured first
    (and appended to `records_path`)."""
    from tqdm.auto import tqdm

    specs = default_policy_specs()
    analyses: dict[tuple[str, str], PromptAnalysis] = {}
    progress = tqdm(total=len(prompt_keys), desc="oracle", unit="prompt", disable=args.no_progress)
    for key in prompt_keys:
        if key in records:
            analyses[key] = analyze(records[key], specs, profile)
            progress.update(1)
    todo = [key for key in prompt_keys if key not in records]
    if todo:
        target, draft = models.pair()
        eos = models.eos()
        for prompt in models.prompts(todo):
            progress.set_postfix_str(f"{prompt.task} {prompt.prompt_id}")
            record = measure_prompt(
                target,
                draft,
                prompt.input_ids,
                task=prompt.task,
                prompt_id=prompt.prompt_id,
                max_new_tokens=args.max_new_tokens,
                eos_token_ids=eos,
                real_oracle=not args.skip_real_oracle,
                reference_schedule=args.reference_schedule,
            )
            with records_path.open("a") as file:
                file.write(json.dumps(record.to_json()) + "\n")
            analyses[record.key] = analyze(record, specs, profile)
            progress.update(1)
    progress.close()
    return analyses


def _run_config(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The "config" of the summary: the run's settings and provenance."""
    return {
        "command": command,
        "pair": "smoke (tiny random fp32 Llama + perturbed copy)" if args.smoke else args.pair,
        "task": args.task,
        "prompts_file": args.prompts,
        "n": args.n,
        "seed": args.seed,
        "max_new_tokens": args.max_new_tokens,
        "dtype": dtype_name(args.dtype, pair=_pair_name(args)),
        "dtype_reason": dtype_choice(args.dtype, pair=_pair_name(args)).reason,
        "threads": args.threads,
        "real_oracle": not args.skip_real_oracle,
        "reference_schedule": args.reference_schedule,
        "max_prompt_chars": args.max_prompt_chars,
        "bench_jsonl": args.bench_jsonl,
        "versions": library_versions(),
        "machine": machine_info(),
        "git": git_state(),
    }


class _LazyModels:
    """Loads the pair (and tokenizer) only when a prompt has to be measured."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._pair: Any = None

    def _load(self) -> Any:
        if self._pair is None:
            self._pair = load_models(
                _pair_name(self.args), dtype=self.args.dtype, threads=self.args.threads
            )
        return self._pair

    def pair(self) -> tuple[Any, Any]:
        target, draft, _ = self._load()
        return target, draft

    def eos(self) -> tuple[int, ...]:
        target, _, tokenizer = self._load()
        return eos_token_ids(target, tokenizer)

    def prompts(self, keys: Sequence[tuple[str, str]]) -> list[PromptInput]:
        """The input ids of the prompts named by `keys`, in that order."""
        if self.args.smoke:
            return [
                PromptInput(task, pid, _smoke_ids(task, pid, self.args.seed)) for task, pid in keys
            ]
        from dynaspec.prompts import render_prompt, should_use_chat

        _, _, tokenizer = self._load()
        chat = should_use_chat(tokenizer)
        texts = {(p.task, p.id): p.text for p in _load_prompt_objects(self.args)}
        return [
            PromptInput(task, pid, render_prompt(tokenizer, texts[(task, pid)], chat=chat))
            for task, pid in keys
        ]


SMOKE_VOCAB = 256  # smoke prompts use byte tokens only (the tiny pair's vocabulary + EOS)


def _smoke_ids(task: str, prompt_id: str, seed: int) -> torch.Tensor:
    """A random (1, 8..16) byte-token prompt, reproducible from (task, id, seed)."""
    digest = sum((i + 1) * ord(c) for i, c in enumerate(f"{seed}/{task}/{prompt_id}"))
    generator = torch.Generator().manual_seed(digest)
    length = int(torch.randint(8, 17, (1,), generator=generator))
    return torch.randint(0, SMOKE_VOCAB, (1, length), generator=generator)


def _load_prompt_objects(args: argparse.Namespace) -> list[Any]:
    from dynaspec.eval.data import load_prompt_file, load_prompts

    if args.prompts:
        return load_prompt_file(args.prompts)[: args.n]
    return load_prompts(args.task, args.n, args.seed, max_prompt_chars=args.max_prompt_chars)


def _prompt_keys(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(task, id) of every prompt of the run, in run order (tasks interleaved)."""
    if args.smoke and not args.prompts:
        from dynaspec.eval.data import TASKS

        tasks = TASKS if args.task == "all" else (args.task,)
        return [(task, f"random/{i}") for i in range(args.n) for task in tasks]
    return [(p.task, p.id) for p in _load_prompt_objects(args)]


def _load_records(out: Path, args: argparse.Namespace) -> dict[tuple[str, str], PromptRecord]:
    path = out / RECORDS_FILE
    records: dict[tuple[str, str], PromptRecord] = {}
    if not path.exists():
        return records
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if line.strip():
            record = _parsed(path, number, line, PromptRecord.from_json)
            if record.max_new_tokens == args.max_new_tokens:
                records[record.key] = record
    return records


def _parsed(path: Path, line_number: int | None, text: str, parse: Callable[[Any], T]) -> T:
    """parse(the JSON in `text`); a damaged file (a run killed while writing it, an edit)
    raises InputError saying how to go on."""
    try:
        return parse(json.loads(text))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as error:
        where, fix = (
            (f"{path}, line {line_number}", "delete that line (its prompt is measured again)")
            if line_number
            else (str(path), "delete the file (the costs are measured again)")
        )
        raise InputError(
            f"--resume: {where} is damaged ({type(error).__name__}: {error}): {fix}, "
            "or drop --resume to start afresh"
        ) from None


def _pair_name(args: argparse.Namespace) -> str:
    """The pair load_models() loads: the tiny one with --smoke."""
    return "tiny" if args.smoke else args.pair


def _setup(args: argparse.Namespace) -> dict[str, Any]:
    """What must not change between a run and its --resume."""
    return {
        "pair": "smoke" if args.smoke else args.pair,
        "dtype": dtype_name(args.dtype, pair=_pair_name(args)),
        "max_new_tokens": args.max_new_tokens,
    }


def _load_costs(out: Path, setup: dict[str, Any]) -> CostProfile | None:
    """The costs of an earlier run in `out`; ConfigError when it was made with another setup
    (pair, dtype, max new tokens): its records must not be mixed with this run's."""
    path = out / COSTS_FILE
    if not path.exists():
        return None
    profile, stored = _parsed(
        path,
        None,
        path.read_text(errors="replace"),
        lambda data: (CostProfile.from_json(data), data.get("setup", setup)),
    )
    if stored != setup:
        raise ConfigError(
            f"--resume: {out} holds a run with {stored}, this one is {setup}: "
            "use another --out, or drop --resume to start afresh"
        )
    return profile
