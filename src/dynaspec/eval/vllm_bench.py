"""dynaspec's proposers inside vLLM against vLLM alone and vLLM's own `ngram` (docs/vllm.md).

Runs in the virtual environment of scripts/vllm-cpu-venv.sh (vLLM is not a dependency of
dynaspec). Every method gets the same prompt token ids, an untimed warm-up, then the prompts
one request at a time and in groups of `--concurrency` requests; each method runs in a
process of its own (vLLM's engine does not give its memory back, and LD_PRELOAD of Intel's
OpenMP, which vLLM's CPU build asks for, must be set before a process starts).

    python -m dynaspec.eval.vllm_bench --smoke --out DIR          # tiny random models
    python -m dynaspec.eval.vllm_bench --target FOLDER --draft PRESET --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

METHODS = ("alone", "ngram", "lookup", "suffix", "draft")
PLUGIN = "dynaspec.integrations.vllm."
PROPOSERS = {
    "lookup": PLUGIN + "LookupProposer",
    "suffix": PLUGIN + "LookupProposer",  # with DYNASPEC_VLLM_SUFFIX_CACHE (SUFFIX_CACHE_MB)
    "draft": PLUGIN + "DraftModelProposer",
}
SUFFIX_CACHE_MB = 64  # the "suffix" method's cache, over the requests of its vLLM process


def speculative_config(method: str, k: int, ngram: int) -> dict[str, Any] | None:
    """vLLM's `speculative_config` for a method (None: vLLM alone)."""
    if method == "alone":
        return None
    if method == "ngram":
        return {
            "method": "ngram",
            "num_speculative_tokens": k,
            "prompt_lookup_max": ngram,
            "prompt_lookup_min": 1,
        }
    return {"method": "custom_class", "model": PROPOSERS[method], "num_speculative_tokens": k}


def run_method(job: dict[str, Any]) -> dict[str, Any]:
    """One method in this process: the engine, a warm-up, then the timed groups."""
    from vllm import LLM, SamplingParams

    spec = speculative_config(job["method"], job["k"], job["ngram"])
    started = time.perf_counter()
    llm = LLM(
        model=job["target"],
        dtype=job["dtype"],
        max_model_len=job["max_model_len"],
        max_num_seqs=max(job["concurrency"]),
        speculative_config=spec,
        enforce_eager=True,
        seed=0,
    )
    startup_s = time.perf_counter() - started
    params = SamplingParams(temperature=0.0, max_tokens=job["max_tokens"], ignore_eos=False)
    prompts = [{"prompt_token_ids": ids} for ids in job["prompts"]]
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=8), use_tqdm=False)
    runs = []
    for width in job["concurrency"]:
        outputs: list[list[int]] = []
        seconds: list[float] = []
        for start in range(0, len(prompts), width):
            group = prompts[start : start + width]
            began = time.perf_counter()
            done = llm.generate(group, params, use_tqdm=False)
            seconds.append(time.perf_counter() - began)
            outputs.extend(list(o.outputs[0].token_ids) for o in done)
        runs.append({"concurrency": width, "seconds": seconds, "outputs": outputs})
    return {
        "method": job["method"],
        "speculative_config": spec,
        "startup_s": startup_s,
        "runs": runs,
        "proposer": _proposer_stats(llm),
    }


def _proposer_stats(llm: Any) -> dict[str, Any] | None:
    """The dynaspec proposer's counts, where the engine runs in this process."""
    try:
        runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
        return runner.drafter.summary()
    except AttributeError:
        return None


def run_all(args: argparse.Namespace, prompts: list[list[int]], labels: list[str]) -> dict:
    """Every method in a child process, one after another; the record of the run."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = _config(args)  # before the runs: the code and machine they ran on
    results = []
    for method in args.methods:
        job = {
            "method": method,
            "target": args.target,
            "dtype": args.dtype,
            "max_model_len": args.max_model_len,
            "max_tokens": args.max_tokens,
            "concurrency": args.concurrency,
            "k": args.k,
            "ngram": args.ngram,
            "prompts": prompts,
        }
        job_file, result_file = out / f"job-{method}.json", out / f"result-{method}.json"
        job_file.write_text(json.dumps(job))
        print(f"[vllm-bench] {method}: starting vLLM ...", file=sys.stderr, flush=True)
        env = _child_env(args, method)
        command = [sys.executable, "-m", "dynaspec.eval.vllm_bench", "--job", str(job_file)]
        with open(out / f"log-{method}.txt", "w") as log:
            subprocess.run(command, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
        results.append(json.loads(result_file.read_text()))
        job_file.unlink()
    return {"config": config, "labels": labels, "prompts": prompts, "results": results}


def _child_env(args: argparse.Namespace, method: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(args.kv_cache_gib))
    iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
    if iomp.exists() and "libiomp5" not in env.get("LD_PRELOAD", ""):
        env["LD_PRELOAD"] = f"{iomp}:{env['LD_PRELOAD']}" if env.get("LD_PRELOAD") else str(iomp)
    if method == "draft":
        env["DYNASPEC_VLLM_DRAFT"] = args.draft
        if args.draft_dtype:
            env["DYNASPEC_VLLM_DRAFT_DTYPE"] = args.draft_dtype
    if method == "suffix":
        env["DYNASPEC_VLLM_SUFFIX_CACHE"] = str(SUFFIX_CACHE_MB)
    env["DYNASPEC_VLLM_NGRAM"] = str(args.ngram)
    return env


def _config(args: argparse.Namespace) -> dict[str, Any]:
    """The run's settings and provenance (eval/provenance.py: versions, machine, git)."""
    import vllm

    from dynaspec.eval.provenance import git_state, library_versions, machine_info

    return {
        "target": args.target,
        "draft": args.draft,
        "dtype": args.dtype,
        "k": args.k,
        "ngram": args.ngram,
        "max_tokens": args.max_tokens,
        "concurrency": args.concurrency,
        "versions": {**library_versions(), "vllm": vllm.__version__},
        "machine": machine_info(),
        "git": git_state(),
    }


def table(record: dict[str, Any]) -> str:
    """Markdown: tok/s per method and concurrency, against vLLM alone, outputs compared."""
    results = {r["method"]: r for r in record["results"]}
    base = results.get("alone")
    lines = [
        "| method | concurrency | tok/s | x vLLM alone (median per prompt) | outputs = alone |",
        "|---|---:|---:|---:|:---:|",
    ]
    for method, result in results.items():
        for index, run in enumerate(result["runs"]):
            tokens = sum(map(len, run["outputs"]))
            rate = tokens / sum(run["seconds"])
            ratio, same = "", ""
            if base is not None:
                ref = base["runs"][index]
                ratios = [r / s for r, s in zip(ref["seconds"], run["seconds"], strict=True)]
                ratio = f"{statistics.median(ratios):.2f}x"
                equal = sum(a == b for a, b in zip(run["outputs"], ref["outputs"], strict=True))
                same = f"{equal}/{len(run['outputs'])}"
            lines.append(f"| {method} | {run['concurrency']} | {rate:.2f} | {ratio} | {same} |")
    return "\n".join(lines)


def smoke_models(folder: Path) -> tuple[str, str, list[list[int]]]:
    """A tiny random target and its draft saved where vLLM can load them (head size 64, as
    vLLM's CPU attention needs), and prompts that make it repeat itself."""
    from dynaspec.models.tiny import TinyPairConfig, tiny_pair

    target, draft, tokenizer = tiny_pair(TinyPairConfig(hidden_size=256))
    for model, name in ((target, "target"), (draft, "draft")):
        model.config.head_dim = 64
        model.save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    texts = ["def f(x):", "abcabcabc", "the the the", "0, 1, 2, 3"]
    return str(folder / "target"), str(folder / "draft"), [list(t.encode()) for t in texts]


def real_prompts(args: argparse.Namespace) -> tuple[list[list[int]], list[str]]:
    from transformers import AutoTokenizer

    from dynaspec.eval.data import load_prompts
    from dynaspec.prompts import render_prompt

    tokenizer = AutoTokenizer.from_pretrained(args.target)
    prompts, labels = [], []
    for task in args.tasks:
        for prompt in load_prompts(task, args.n, seed=args.prompt_seed):
            ids = render_prompt(tokenizer, prompt.text, chat=True)[0].tolist()
            prompts.append(ids)
            labels.append(f"{prompt.task}/{prompt.id}")
    return prompts, labels


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dynaspec.eval.vllm_bench")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny random models, 24 tokens")
    parser.add_argument("--target", help="the target's model folder (vLLM loads it)")
    parser.add_argument("--draft", help="DraftModelProposer's draft (preset, folder or id)")
    parser.add_argument("--draft-dtype", default=None, help="the draft's dtype")
    parser.add_argument("--dtype", default="float32", help="vLLM's dtype for the target")
    parser.add_argument("--methods", type=_names, default=list(METHODS))
    parser.add_argument("--tasks", type=_names, default=["grounded", "open-ended", "code"])
    parser.add_argument("--n", type=int, default=2, help="prompts per task")
    parser.add_argument("--prompt-seed", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--concurrency", type=_counts, default=[1, 4])
    parser.add_argument("--k", type=int, default=10, help="num_speculative_tokens")
    parser.add_argument("--ngram", type=int, default=3, help="longest n-gram matched")
    parser.add_argument("--kv-cache-gib", type=int, default=2, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument("--out", default=None, help="folder for the record (default: temp)")
    return parser.parse_args(argv)


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _counts(text: str) -> list[int]:
    return [int(part) for part in _names(text)]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.job:
        job_file = Path(args.job)
        result = run_method(json.loads(job_file.read_text()))
        name = job_file.name.replace("job-", "result-")
        (job_file.parent / name).write_text(json.dumps(result))
        return 0
    args.out = args.out or tempfile.mkdtemp(prefix="vllm-bench-")
    if args.smoke:
        args.target, args.draft, prompts = smoke_models(Path(args.out) / "models")
        args.max_tokens, args.concurrency, args.k, args.max_model_len = 24, [1, 2], 4, 256
        labels = [f"smoke/{i}" for i in range(len(prompts))]
    else:
        if not args.target:
            raise SystemExit("give --target FOLDER (a model folder vLLM can load), or --smoke")
        prompts, labels = real_prompts(args)
    record = run_all(args, prompts, labels)
    (Path(args.out) / "vllm-bench.json").write_text(json.dumps(record, indent=1))
    (Path(args.out) / "table.md").write_text(table(record) + "\n")
    print(table(record))
    print(f"record: {Path(args.out) / 'vllm-bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
