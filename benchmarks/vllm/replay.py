"""Replays vLLM's greedy outputs through dynaspec's vLLM proposers on a fake clock, to see
how a proposer's choices would play out under a step cost T(N) = a + b N (N: tokens the step
verifies), without running vLLM: every method's output is the target's (lossless), so the
target's next token is known from the recorded output.

    python benchmarks/vllm/replay.py RECORD.json --a 0.55 --b 0.03 [--k 10]

RECORD.json: a `python -m dynaspec.eval.vllm_bench` record (its prompts and vLLM alone's
outputs). Prints, per prompt, the simulated seconds of each proposer variant and its ratio
to copying the whole match every step (what vLLM's `ngram` does).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/vllm_sim.py

from tests.vllm_sim import SimEngine  # noqa: E402

from dynaspec.integrations.vllm import LookupProposer, ProposerSettings  # noqa: E402


def replay(prompt, output, make, a, b, k):
    now = [0.0]
    sequence = list(prompt) + list(output)

    def target(tokens):
        return sequence[len(tokens)] if len(tokens) < len(sequence) else 0

    proposer = make(lambda: now[0])
    engine = SimEngine(
        proposer, target, max_num_seqs=1, max_model_len=len(sequence) + k + 2, k=k,
        step_cost=lambda n: a + b * n, clock=now,
    )
    engine.add(prompt, len(output))
    engine.run()
    return now[0], engine.steps, proposer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("record")
    parser.add_argument("--a", type=float, required=True, help="seconds of a step, fixed part")
    parser.add_argument("--b", type=float, required=True, help="seconds per verified token")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--ngram", type=int, default=3)
    args = parser.parse_args()
    record = json.loads(Path(args.record).read_text())
    alone = next(r for r in record["results"] if r["method"] == "alone")["runs"][0]["outputs"]
    variants = {
        "copy-all": "constant",
        "adaptive": "adaptive",
    }
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    for label, prompt, output in zip(record["labels"], record["prompts"], alone, strict=True):
        times = {}
        for name, schedule in variants.items():
            settings = ProposerSettings(args.k, schedule=schedule, ngram=args.ngram)
            seconds, steps, proposer = replay(
                prompt, output, lambda clock, s=settings: LookupProposer(settings=s, clock=clock),
                args.a, args.b, args.k,
            )
            times[name] = seconds
            print(f"{label:40s} {name:10s} {seconds:7.1f} s {steps:4d} steps "
                  f"acceptance {proposer.stats.acceptance:.2f}")
        for name in variants:
            ratios[name].append(times["copy-all"] / times[name])
    for name, values in ratios.items():
        print(name, "median x copy-all:", round(statistics.median(values), 3),
              [round(v, 2) for v in values])


if __name__ == "__main__":
    main()
