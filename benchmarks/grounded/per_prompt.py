"""Per prompt, from the runs in one folder of this suite (default: avx512-2026-12-06): grounded, the hybrid against transformers' prompt
lookup (10); open-ended, the hybrid against the draft model alone (tokens per second, each the
bench's median of its three runs). Where a method's output parts from the target alone's (a
tie, classified by the bench), the new token it parts at is shown: the two then ran different
texts from there.

    python benchmarks/grounded/per_prompt.py [FOLDER]
"""

import json
import statistics
import sys
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / (sys.argv[1] if len(sys.argv) > 1 else "avx512-2026-12-06")

PAIRS = {
    "grounded": ("hybrid-w4a8", "hf-prompt-lookup"),
    "open-ended": ("hybrid-w4a8", "adaptive-w4a8"),
}
for task, (mine, theirs) in PAIRS.items():
    ratios = []
    for path in sorted(FOLDER.glob("*/results.jsonl")):
        speed, parts = {}, {}
        for line in path.open():
            record = json.loads(line)
            if record["task"] == task:
                speed[record["prompt_id"], record["method"]] = record["tokens_per_s"]
                if record["mismatch"]:
                    kind = record["mismatch"]["kind"]
                    parts[record["prompt_id"], record["method"]] = (
                        f" {record['method']} parts at {record['mismatch']['position']} ({kind})"
                    )
        for key in sorted({key for key, _ in speed}):
            if (key, mine) in speed and (key, theirs) in speed:
                ratios.append(speed[key, mine] / speed[key, theirs])
                print(
                    f"{path.parent.name} {key:28s} {mine} {speed[key, mine]:5.1f} tok/s, "
                    f"{theirs} {speed[key, theirs]:5.1f}: {ratios[-1]:.3f}x"
                    + parts.get((key, mine), "")
                    + parts.get((key, theirs), "")
                )
    if ratios:
        print(
            f"{task}: {mine} / {theirs}: median {statistics.median(ratios):.3f}x, "
            f"{min(ratios):.3f}-{max(ratios):.3f}x over {len(ratios)} prompts\n"
        )
