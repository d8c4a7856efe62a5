"""Per-prompt ratios of the fast settings against the peers in peers38/, twice: from the
median of each method's two runs, and from the faster of the two (the run the bench's record
keeps as wall_time_s):   python peers_table.py"""

import json
import statistics
from pathlib import Path

rows = [json.loads(line) for line in (Path(__file__).parent / "peers38/results.jsonl").open()]
TASKS = ["grounded", "open-ended", "code"]
COLUMNS = [
    ("bf16 exact / target", "fast-hybrid-w4a8", "target"),
    ("w8a8 / target", "w8a8-hybrid-w4a8", "target"),
    ("w4a8 / target", "w4a8-hybrid-w4a8", "target"),
    ("w4a8 / llama.cpp q4", "w4a8-hybrid-w4a8", "llamacpp-target"),
    ("w8a8 / llama.cpp q4", "w8a8-hybrid-w4a8", "llamacpp-target"),
    ("w8a8 / OpenVINO int8 best", "w8a8-hybrid-w4a8", "openvino-best"),
]


def table(pick) -> None:
    wall = {
        (r["task"] + "/" + r["prompt_id"], r["method"]): pick(
            r.get("wall_times_s") or [r["wall_time_s"]]
        )
        for r in rows
    }
    prompts = sorted({p for p, _ in wall}, key=lambda p: (TASKS.index(p.split("/")[0]), p))
    for p in prompts:  # the faster of OpenVINO GenAI's two int8 settings
        wall[(p, "openvino-best")] = min(
            wall[(p, "openvino-spec")], wall[(p, "openvino-prompt-lookup")]
        )
    print("| prompt | " + " | ".join(c[0] for c in COLUMNS) + " |")
    print("|---|" + "---:|" * len(COLUMNS))
    for p in prompts:
        print(
            f"| {p} | "
            + " | ".join(f"{wall[(p, b)] / wall[(p, a)]:.2f}" for _, a, b in COLUMNS)
            + " |"
        )
    for task in TASKS:
        inside = [p for p in prompts if p.startswith(task)]
        ratios = [
            statistics.median(wall[(p, b)] / wall[(p, a)] for p in inside) for _, a, b in COLUMNS
        ]
        print(f"| {task} (median) | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")


print("Median of each method's two runs:\n")
table(statistics.median)
print("\nThe faster of each method's two runs (the bench's kept run):\n")
table(min)
