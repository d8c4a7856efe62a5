"""The table of open_repeat.py's runs: per prompt, the hybrid's median tokens per second over
the draft model alone's, the range over runs (the hybrid's slowest against the model's
fastest, and the other way round), and whether every run made the same text:

    python open_table.py open7.jsonl
"""

import json
import statistics
import sys
from collections import defaultdict

runs = defaultdict(lambda: defaultdict(list))  # (seed, prompt) -> method -> records
with open(sys.argv[1]) as lines:
    for line in lines:
        record = json.loads(line)
        runs[(record["seed"], record["prompt_id"])][record["method"]].append(record)

print(
    "| seed | prompt | new tokens | hybrid tok/s | model tok/s "
    "| **hybrid / model** | range | texts |"
)
print("|---:|---|---:|---:|---:|---:|---|---|")
ratios = []
for (seed, prompt), methods in runs.items():
    rate = {
        name: [r["new_tokens"] / r["wall_s"] for r in records] for name, records in methods.items()
    }
    hybrid, model = statistics.median(rate["hybrid"]), statistics.median(rate["model"])
    low, high = min(rate["hybrid"]) / max(rate["model"]), max(rate["hybrid"]) / min(rate["model"])
    texts = {tuple(r["output"]) for records in methods.values() for r in records}
    lengths = sorted({len(t) for t in texts})
    ratios.append(hybrid / model)
    print(
        f"| {seed} | {prompt} | {'/'.join(map(str, lengths))} | {hybrid:.1f} | {model:.1f} "
        f"| **{hybrid / model:.2f}** | {low:.2f}-{high:.2f} "
        f"| {'one' if len(texts) == 1 else f'{len(texts)} different'} |"
    )
print()
print(
    f"median {statistics.median(ratios):.2f}x; >= 0.95x on "
    f"{sum(r >= 0.95 for r in ratios)} of {len(ratios)}; lowest {min(ratios):.2f}x"
)
