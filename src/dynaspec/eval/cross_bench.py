"""A draft of another model family: dynaspec's two ways against transformers' UAG.

Every method decodes the same prompt token ids (the target's chat template), greedily, after
one untimed warm-up each; the order of the methods turns from prompt to prompt. Methods:

    target                 dynaspec, the target alone (the baseline)
    string-adaptive        through text (cross_tokenizer="string"), the cost-aware rule
    string-dynamic         through text, transformers' dynamic rule (20, confidence 0.4)
    intersection-adaptive  over the shared tokens (cross_tokenizer="intersection"), adaptive
    intersection-dynamic   over the shared tokens, dynamic
    string-hybrid          through text, adaptive, with prompt lookup (up to 32 copied tokens,
                           as `dynaspec bench`'s hybrids)
    hf-uag                 transformers' universal assisted generation (assistant_tokenizer=),
                           its default dynamic schedule
    eager-target           with --static: dynaspec, the transformers target alone

With `--static` dynaspec's methods run on the static target and draft (float32 or bf16
weights prepacked for oneDNN, docs/design/fast-path.md; `--draft-quantize int8` the draft's in
int8), the target's own output; transformers' on the transformers models, as its users run
them.

Each speculative output is compared with the target alone's (greedy, so equal unless a
near-tie of the target's logits) and each difference classified, a tie or a bug
(dynaspec/mismatch.py); the draft's cost per proposed target token is given in
target steps (the target alone's seconds per token on the same prompt).

    python -m dynaspec.eval.cross_bench --target qwen2.5-coder-1.5b --draft smollm2-135m \\
        --tasks summarization,open-ended,code --n 2 --seed 1 --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

SCHEDULES = {
    "adaptive": {"num_assistant_tokens_schedule": "adaptive"},
    "dynamic": {
        "num_assistant_tokens_schedule": "dynamic",
        "num_assistant_tokens": 20,
        "assistant_confidence_threshold": 0.4,
    },
    "hybrid": {"num_assistant_tokens_schedule": "adaptive", "prompt_lookup_num_tokens": 32},
}
METHODS = (
    "target",
    "string-adaptive",
    "string-dynamic",
    "intersection-adaptive",
    "intersection-dynamic",
    "string-hybrid",
    "hf-uag",
    "eager-target",
)


class Pair:
    """The loaded target and draft, their tokenizers, and how one method runs on them."""

    def __init__(
        self,
        target: Any,
        draft: Any,
        tokenizers: tuple[Any, Any],
        fast_target: Any = None,
        fast_draft: Any = None,
    ) -> None:
        from dynaspec.eval.hf_peer import HFPeer

        self.target, self.draft, self.tokenizers = target, draft, tokenizers
        self.fast_target = fast_target  # dynaspec's methods run on them, when given
        self.fast_draft = fast_draft
        self.peer = HFPeer(target, draft)

    def run(self, method: str, ids: torch.Tensor, new_tokens: int) -> dict[str, Any]:
        """One generation: its new tokens, wall time and round counts."""
        if method == "hf-uag":
            return self._run_hf(ids, new_tokens)
        from dynaspec.generation import generate

        options: dict[str, Any] = {"max_new_tokens": new_tokens, "do_sample": False}
        target = self.target if self.fast_target is None else self.fast_target
        draft = None
        if method == "eager-target":
            target = self.target
        elif method != "target":
            how, schedule = method.split("-")
            draft = self.draft if self.fast_draft is None else self.fast_draft
            options.update(SCHEDULES[schedule], cross_tokenizer=how)
            options.update(tokenizer=self.tokenizers[0], assistant_tokenizer=self.tokenizers[1])
        start = perf_counter()
        out = generate(target, draft, ids, **options)
        wall = perf_counter() - start
        summary = out.stats.summary()
        return {
            "tokens": out.sequences[0, ids.shape[1] :].tolist(),
            "seconds": wall,
            "rounds": summary.rounds,
            "drafted": summary.num_drafted,
            "accepted": summary.num_accepted,
            "draft_time_s": summary.draft_time_s,
            "draft_forwards": summary.draft_forwards,
        }

    def _run_hf(self, ids: torch.Tensor, new_tokens: int) -> dict[str, Any]:
        from dynaspec.compat.settings import pad_token_id
        from dynaspec.compat.validation import eos_ids
        from dynaspec.eval.hf_peer import HF_DYNAMIC

        eos = self.target.generation_config.eos_token_id  # what dynaspec's methods stop at
        pad = pad_token_id(
            self.target, tokenizer=self.tokenizers[0], eos_token_ids=eos_ids(eos, self.target)
        )
        result = self.peer.generate(
            ids,
            max_new_tokens=new_tokens,
            eos_token_id=eos,
            pad_token_id=pad,
            assist=HF_DYNAMIC,
            tokenizers=self.tokenizers,
        )
        return {
            "tokens": result.sequences[0, ids.shape[1] :].tolist(),
            "seconds": result.wall_time_s,
            "rounds": result.target_forwards,
            "drafted": sum(result.drafted_per_round) if result.drafted_per_round else None,
            "accepted": sum(result.accepted_per_round) if result.accepted_per_round else None,
            "draft_time_s": None,
            "draft_forwards": result.draft_forwards,
        }


def load(args: argparse.Namespace) -> Pair:
    from dynaspec.errors import UnsupportedModelError
    from dynaspec.models.loading import load_model

    target, tokenizer = load_model(args.target, dtype=args.dtype)
    draft, draft_tokenizer = load_model(args.draft, dtype=args.dtype)
    if not args.static:
        return Pair(target, draft, (tokenizer, draft_tokenizer))
    fast = load_model(args.target, dtype=args.dtype, static=True)[0]
    quantize = None if args.draft_quantize == "none" else args.draft_quantize
    try:
        fast_draft = load_model(args.draft, dtype=args.dtype, static=True, quantize=quantize)[0]
    except UnsupportedModelError as error:  # e.g. sliding-window attention: transformers'
        print(f"cross bench: the draft runs as a transformers model: {error}", file=sys.stderr)
        fast_draft = None
    return Pair(target, draft, (tokenizer, draft_tokenizer), fast, fast_draft)


def prompts(args: argparse.Namespace, tokenizer: Any) -> list[tuple[str, torch.Tensor]]:
    """(label, token ids) of every prompt: `--n` per task, sampled with `--seed`."""
    from dynaspec.eval.data import load_prompts
    from dynaspec.prompts import render_prompt, should_use_chat

    chat = should_use_chat(tokenizer)
    out = []
    for task in args.tasks:
        for prompt in load_prompts(task, args.n, seed=args.seed):
            out.append(
                (f"{prompt.task}/{prompt.id}", render_prompt(tokenizer, prompt.text, chat=chat))
            )
    return out


def run_all(pair: Pair, items: list[tuple[str, torch.Tensor]], args: argparse.Namespace) -> list:
    """Every method on every prompt (methods in a turning order), after one warm-up each."""
    from tqdm import tqdm

    warm = items[0][1][:, :32]
    for method in args.methods:
        pair.run(method, warm, 8)
    rows = []
    bar = tqdm(total=len(items) * len(args.methods), desc="cross bench", disable=args.no_progress)
    for index, (label, ids) in enumerate(items):
        turn = index % len(args.methods)
        for method in [*args.methods[turn:], *args.methods[:turn]]:
            result = pair.run(method, ids, args.max_new_tokens)
            rows.append({"prompt": label, "method": method, **result})
            bar.update()
    bar.close()
    return rows


def classify(pair: Pair, rows: list[dict[str, Any]], items: list[tuple[str, torch.Tensor]]) -> None:
    """Each output that differs from the target alone's gets `divergence`: where, and whether
    the target's top two logits there are a tie in its dtype or not (dynaspec/mismatch.py), by
    the target that decoded the reference (the static one with --static)."""
    from dynaspec.mismatch import classify_mismatch

    reference = pair.target if pair.fast_target is None else pair.fast_target
    base = {r["prompt"]: r["tokens"] for r in rows if r["method"] == "target"}
    ids = dict(items)
    for row in rows:
        alone = base.get(row["prompt"])
        if alone is None or row["tokens"] == alone:
            continue
        found = classify_mismatch(reference, ids[row["prompt"]], alone, row["tokens"])
        row["divergence"] = {"position": found.position, "kind": found.kind, "steps": found.steps}


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: median speedup over the target alone (per prompt), over hf-uag, outputs
    equal to the target's, acceptance, draft cost per proposed token in target steps."""
    by = {(r["prompt"], r["method"]): r for r in rows}
    labels = list(dict.fromkeys(r["prompt"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    out: dict[str, dict[str, Any]] = {}
    for method in methods:
        mine = [by[p, method] for p in labels]
        base = [by.get((p, "target")) for p in labels]
        peer = [by.get((p, "hf-uag")) for p in labels]
        pairs = list(zip(mine, base, strict=True))
        out[method] = {
            "tok_per_s": statistics.median(_rate(r) for r in mine),
            "x_target": _median_ratio(mine, base),
            "x_hf_uag": _median_ratio(mine, peer),
            "equal": sum(b is not None and r["tokens"] == b["tokens"] for r, b in pairs),
            "ties": sum(r.get("divergence", {}).get("kind") == "tie" for r in mine),
            "bugs": sum(r.get("divergence", {}).get("kind") == "BUG" for r in mine),
            "prompts": len(mine),
            "acceptance": _acceptance(mine),
            "draft_steps_per_token": _draft_steps(mine, base),
            "per_task_x_target": _per_task(mine, base),
        }
    return out


def _rate(row: dict[str, Any]) -> float:
    return len(row["tokens"]) / row["seconds"]


def _median_ratio(rows: Sequence[dict], bases: Sequence[dict | None]) -> float | None:
    ratios = [_rate(r) / _rate(b) for r, b in zip(rows, bases, strict=True) if b is not None]
    return statistics.median(ratios) if ratios else None


def _acceptance(rows: Sequence[dict]) -> float | None:
    drafted = [r["drafted"] for r in rows if r["drafted"]]
    if not drafted:
        return None
    return sum(r["accepted"] for r in rows if r["drafted"]) / sum(drafted)


def _draft_steps(rows: Sequence[dict], bases: Sequence[dict | None]) -> float | None:
    """Median over prompts of (draft seconds per proposed token) / (target seconds per token)."""
    values = [
        (r["draft_time_s"] / r["drafted"]) / (b["seconds"] / len(b["tokens"]))
        for r, b in zip(rows, bases, strict=True)
        if b is not None and r["drafted"] and r["draft_time_s"] is not None
    ]
    return statistics.median(values) if values else None


def _per_task(rows: Sequence[dict], bases: Sequence[dict | None]) -> dict[str, float]:
    tasks: dict[str, list[float]] = {}
    for r, b in zip(rows, bases, strict=True):
        if b is not None:
            tasks.setdefault(r["prompt"].split("/")[0], []).append(_rate(r) / _rate(b))
    return {task: statistics.median(values) for task, values in tasks.items()}


def table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [
        "| method | tok/s (median) | x target alone | x hf-uag | acceptance | "
        "draft cost per token (target steps) | outputs = target | x target per task |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for method, s in summary.items():
        tasks = ", ".join(f"{t} {v:.2f}" for t, v in s["per_task_x_target"].items())
        lines.append(
            f"| {method} | {s['tok_per_s']:.2f} | {_fmt(s['x_target'])} | {_fmt(s['x_hf_uag'])} "
            f"| {_fmt(s['acceptance'])} | {_fmt(s['draft_steps_per_token'])} "
            f"| {s['equal']}/{s['prompts']}{_differ(s)} | {tasks} |"
        )
    return "\n".join(lines)


def _differ(summary: dict[str, Any]) -> str:
    """' (1 tie, 0 BUG)' after the equal count, when any output differs."""
    if summary["equal"] == summary["prompts"]:
        return ""
    return f" ({summary['ties']} tie, {summary['bugs']} BUG)"


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dynaspec.eval.cross_bench")
    parser.add_argument("--target", default="qwen2.5-coder-1.5b")
    parser.add_argument("--draft", default="smollm2-135m", help="a draft of another family")
    parser.add_argument("--dtype", default="machine")
    parser.add_argument("--methods", type=_names, default=list(METHODS))
    parser.add_argument("--tasks", type=_names, default=["summarization", "open-ended", "code"])
    parser.add_argument("--n", type=int, default=2, help="prompts per task")
    parser.add_argument("--seed", type=int, default=1, help="prompt sample seed (1: held out)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--static", action="store_true", help="dynaspec on the static target and draft"
    )
    parser.add_argument(
        "--draft-quantize",
        choices=("none", "int8", "w4a8"),
        default="none",
        help="with --static: dynaspec's draft weights in int8, or in 4 bits (w4a8, AVX512-VNNI)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--out", required=True, help="folder for the record and table")
    args = parser.parse_args(argv)
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown --methods {', '.join(unknown)}: choose from {', '.join(METHODS)}")
    if "eager-target" in args.methods and not args.static:
        args.methods.remove("eager-target")  # without --static it is "target"
    return args


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: Sequence[str] | None = None) -> int:
    from dynaspec.eval.provenance import git_state, library_versions, machine_info

    args = parse(argv)
    config = {**vars(args), "argv": list(sys.argv if argv is None else argv)}
    config.update(versions=library_versions(), machine=machine_info(), git=git_state())
    pair = load(args)
    items = prompts(args, pair.tokenizers[0])
    rows = run_all(pair, items, args)
    classify(pair, rows, items)
    summary = summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {"config": config, "rows": rows, "summary": summary}
    (out / "cross-bench.json").write_text(json.dumps(record, indent=1))
    (out / "table.md").write_text(table(summary) + "\n")
    print(table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
