"""Per-prompt tokens per second and ratios of a `dynaspec bench` run:

    python benchmarks/eager-w4a8-avx512-2026-12-04/ratios.py RESULTS.jsonl A/B [C/D ...]

prints, per prompt, every method's tok/s, the ratios A/B, C/D, ... and whether each
speculative method's output equals the target alone's.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines]
    pairs = [text.split("/") for text in sys.argv[2:]]
    by_prompt: dict[str, dict[str, dict]] = {}
    for record in records:
        by_prompt.setdefault(record["prompt_id"], {})[record["method"]] = record
    for prompt, methods in by_prompt.items():
        rates = {name: record["tokens_per_s"] for name, record in methods.items()}
        cells = " ".join(f"{name} {rate:.1f}" for name, rate in rates.items())
        ratios = " ".join(f"{a}/{b} {rates[a] / rates[b]:.2f}" for a, b in pairs)
        same = {n: r["matches_target"] for n, r in methods.items() if n != "target"}
        print(f"{prompt:32s} {cells} | {ratios} | equal: {same}")


if __name__ == "__main__":
    main()
