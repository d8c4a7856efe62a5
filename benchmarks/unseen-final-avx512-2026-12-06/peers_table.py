"""Per-prompt ratios of the fast settings against the peers in peers38/ (medians of the two
repeats' wall times):   python peers_table.py"""

import json
import statistics
from pathlib import Path

rows = [json.loads(line) for line in (Path(__file__).parent / "peers38/results.jsonl").open()]
wall: dict[tuple[str, str], list[float]] = {}
for r in rows:
    wall.setdefault((r["task"] + "/" + r["prompt_id"], r["method"]), []).append(r["wall_time_s"])
med = {key: statistics.median(v) for key, v in wall.items()}
prompts = sorted(
    {p for p, _ in med},
    key=lambda p: (["grounded", "open-ended", "code"].index(p.split("/")[0]), p),
)
cols = [
    ("bf16 exact / target", "fast-hybrid-w4a8", "target"),
    ("w8a8 / target", "w8a8-hybrid-w4a8", "target"),
    ("w4a8 / target", "w4a8-hybrid-w4a8", "target"),
    ("w4a8 / llama.cpp q4", "w4a8-hybrid-w4a8", "llamacpp-target"),
    ("w8a8 / llama.cpp q4", "w8a8-hybrid-w4a8", "llamacpp-target"),
    ("w8a8 / OpenVINO int8 best", "w8a8-hybrid-w4a8", "openvino-best"),
]
for p in prompts:
    med[(p, "openvino-best")] = min(med[(p, "openvino-spec")], med[(p, "openvino-prompt-lookup")])
print("| prompt | " + " | ".join(c[0] for c in cols) + " |")
print("|---|" + "---:|" * len(cols))
for p in prompts:
    print(f"| {p} | " + " | ".join(f"{med[(p, b)] / med[(p, a)]:.2f}" for _, a, b in cols) + " |")
for task in ("grounded", "open-ended", "code"):
    inside = [p for p in prompts if p.startswith(task)]
    print(
        f"| {task} (median) | "
        + " | ".join(
            f"{statistics.median(med[(p, b)] / med[(p, a)] for p in inside):.2f}"
            for _, a, b in cols
        )
        + " |"
    )
