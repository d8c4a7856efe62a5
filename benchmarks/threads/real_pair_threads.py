"""Real pair, shared fast adapters: threads decoding with one `load_pair(static=True)` pair
at once give the single-thread output (issue 24's "once with the real pair").

Run: python benchmarks/threads/real_pair_threads.py [--threads 3 --trials 2 --new 16]
"""

from __future__ import annotations

import argparse
import json
import threading

import dynaspec

PROMPTS = ["def fibonacci(n):", "Write a haiku about the sea.", "class Stack:\n    def push"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=3)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--new", type=int, default=16)
    args = parser.parse_args()
    pair = dynaspec.load_pair("qwen2.5-coder", static=True)
    ids = [pair.tokenizer(p, return_tensors="pt").input_ids for p in PROMPTS]

    def run(index: int) -> list[int]:
        prompt = ids[index % len(ids)]
        out = dynaspec.generate(pair.target, pair.draft, prompt, max_new_tokens=args.new)
        return out.sequences[0].tolist()

    alone = [run(i) for i in range(args.threads)]
    results: dict[tuple[int, int], object] = {}

    def worker(trial: int, index: int) -> None:
        try:
            results[trial, index] = run(index)
        except Exception as error:  # noqa: BLE001 (recorded, then counted)
            results[trial, index] = f"{type(error).__name__}: {error}"

    for trial in range(args.trials):
        threads = [threading.Thread(target=worker, args=(trial, i)) for i in range(args.threads)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    same = sum(results[t, i] == alone[i] for t in range(args.trials) for i in range(args.threads))
    summary = {"threads": args.threads, "trials": args.trials, "new_tokens": args.new}
    summary["equal_to_single_thread"] = f"{same} of {args.threads * args.trials}"
    summary["other"] = [r for r in results.values() if isinstance(r, str)]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
