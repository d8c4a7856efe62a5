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


def replay(prompts, outputs, make, a, b, k):
    """The requests `prompts` run together (one engine, as many rows as prompts)."""
    now = [0.0]
    sequences = {tuple(p): list(p) + list(o) for p, o in zip(prompts, outputs, strict=True)}

    def target(tokens):
        for prompt, sequence in sequences.items():  # the request whose prompt this starts with
            if tuple(tokens[: len(prompt)]) == prompt and len(tokens) < len(sequence):
                return sequence[len(tokens)]
        return 0

    proposer = make(lambda: now[0]) if callable(make) else make
    if not callable(make):  # a proposer carried over from earlier groups: its clock moves on
        proposer.clock = lambda: now[0] + proposer.clock_offset
    longest = max(map(len, sequences.values()))
    engine = SimEngine(
        proposer, target, max_num_seqs=len(prompts), max_model_len=longest + k + 2, k=k,
        step_cost=lambda n: a + b * n, clock=now,
    )
    for prompt, output in zip(prompts, outputs, strict=True):
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
    parser.add_argument("--together", type=int, default=1, help="requests run at once")
    args = parser.parse_args()
    record = json.loads(Path(args.record).read_text())
    alone = next(r for r in record["results"] if r["method"] == "alone")["runs"][0]["outputs"]
    variants = {
        "copy-all": "constant",
        "adaptive": "adaptive",
    }
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    width = args.together
    for start in range(0, len(alone), width):
        label = " + ".join(record["labels"][start : start + width])
        prompts, outputs = record["prompts"][start : start + width], alone[start : start + width]
        times = {}
        for name, schedule in variants.items():
            settings = ProposerSettings(args.k, schedule=schedule, ngram=args.ngram)
            seconds, steps, proposer = replay(
                prompts, outputs, lambda clock, s=settings: LookupProposer(settings=s, clock=clock),
                args.a, args.b, args.k,
            )
            times[name] = seconds
            print(f"{label[:60]:60s} {name:10s} {seconds:7.1f} s {steps:4d} steps "
                  f"acceptance {proposer.stats.acceptance:.2f}")
        for name in variants:
            ratios[name].append(times["copy-all"] / times[name])
    for name, values in ratios.items():
        print(name, "median x copy-all:", round(statistics.median(values), 3),
              [round(v, 2) for v in values])


if __name__ == "__main__":
    main()
