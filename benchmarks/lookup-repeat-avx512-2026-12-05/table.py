"""Per-prompt medians of repeated `dynaspec bench --repeat N` runs, as a Markdown table:

    python benchmarks/lookup-repeat-avx512-2026-12-05/table.py METHOD BASE DIR [DIR ...]

Each DIR holds one run's results.jsonl. Per prompt: the target alone's, METHOD's and BASE's
tokens per second (each the median run's), METHOD / BASE in tokens per second, the range
of that ratio over the runs (METHOD's slowest run against BASE's fastest .. the other way),
and how each text relates to its own target alone's (the bench's reference: the static
target for a fast-path method; equal, or where and why it parts). Then the median ratio and
how many prompts reach 1.15x.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def load(folder: Path) -> dict[str, dict[str, dict]]:
    by_prompt: dict[str, dict[str, dict]] = {}
    with open(folder / "results.jsonl", encoding="utf-8") as lines:
        for line in lines:
            record = json.loads(line)
            by_prompt.setdefault(record["prompt_id"], {})[record["method"]] = record
    return by_prompt


def text_relation(record: dict) -> str:
    mismatch = record["mismatch"]
    if mismatch is None:
        return "equal"
    return f"parts at new token {mismatch['position']} ({mismatch['kind']})"


def row(folder: Path, prompt: str, methods: dict[str, dict], method: str, base: str) -> float:
    mine, theirs = methods[method], methods[base]
    ratio = mine["tokens_per_s"] / theirs["tokens_per_s"]
    mine_times = mine.get("wall_times_s") or [mine["wall_time_s"]]
    their_times = theirs.get("wall_times_s") or [theirs["wall_time_s"]]
    per_token = theirs["new_tokens"] / mine["new_tokens"]
    low = min(their_times) / max(mine_times) / per_token
    high = max(their_times) / min(mine_times) / per_token
    cells = [
        folder.name,
        prompt,
        f"{methods['target']['tokens_per_s']:.1f}",
        f"{mine['tokens_per_s']:.1f}",
        f"{theirs['tokens_per_s']:.1f}",
        f"**{ratio:.2f}**",
        f"{low:.2f}-{high:.2f}",
        text_relation(mine),
        text_relation(theirs),
    ]
    print("| " + " | ".join(cells) + " |")
    return ratio


def main() -> None:
    method, base, folders = sys.argv[1], sys.argv[2], [Path(f) for f in sys.argv[3:]]
    print(
        f"| run | prompt | target | {method} | {base} | **{method} / {base}** "
        f"| range over runs | {method}'s text vs its target | {base}'s text vs its target |"
    )
    print("|---|---|---:|---:|---:|---:|---|---|---|")
    ratios = []
    for folder in folders:
        for prompt, methods in load(folder).items():
            ratios.append(row(folder, prompt, methods, method, base))
    reached = sum(ratio >= 1.15 for ratio in ratios)
    print(f"\nmedian {statistics.median(ratios):.2f}x; >= 1.15x on {reached} of {len(ratios)}")


if __name__ == "__main__":
    main()
