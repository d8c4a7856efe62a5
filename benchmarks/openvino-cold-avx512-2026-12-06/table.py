"""Per-prompt ratios of the fast settings against the eager bf16 target and the peers in
tokens per second (new tokens over the median of each method's runs, `wall_times_s`): where
two outputs have the same length, the ratio of their times; where a low-bit model or another
engine stops at its EOS sooner, its rate over the tokens it made. In the given bench folders:

    python table.py peers39 peers38
"""

import json
import statistics
import sys
from pathlib import Path

TASKS = ["grounded", "open-ended", "code"]
COLUMNS = [
    ("bf16 exact / target", "fast-hybrid-w4a8", "target"),
    ("w8a8 / target", "w8a8-hybrid-w4a8", "target"),
    ("w4a8 / target", "w4a8-hybrid-w4a8", "target"),
    ("w4a8 / llama.cpp q4", "w4a8-hybrid-w4a8", "llamacpp-target"),
    ("w8a8 / llama.cpp q4", "w8a8-hybrid-w4a8", "llamacpp-target"),
    ("w8a8 / OpenVINO spec", "w8a8-hybrid-w4a8", "openvino-spec"),
    ("w8a8 / OpenVINO lookup", "w8a8-hybrid-w4a8", "openvino-prompt-lookup"),
    ("w8a8 / OpenVINO int8 best", "w8a8-hybrid-w4a8", "openvino-best"),
]


def table(folder: Path) -> None:
    rows = [json.loads(line) for line in (folder / "results.jsonl").open()]
    rate = {  # tokens per second
        (r["task"] + "/" + r["prompt_id"], r["method"]): r["new_tokens"]
        / statistics.median(r.get("wall_times_s") or [r["wall_time_s"]])
        for r in rows
    }
    prompts = sorted({p for p, _ in rate}, key=lambda p: (TASKS.index(p.split("/")[0]), p))
    for p in prompts:  # the faster of OpenVINO GenAI's two int8 settings
        rate[(p, "openvino-best")] = max(
            rate[(p, "openvino-spec")], rate[(p, "openvino-prompt-lookup")]
        )
    columns = [c for c in COLUMNS if all((p, c[1]) in rate and (p, c[2]) in rate for p in prompts)]
    print(f"{folder.name}: tokens per second, medians of each method's runs\n")
    print("| prompt | " + " | ".join(c[0] for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for p in prompts:
        ratios = [rate[(p, a)] / rate[(p, b)] for _, a, b in columns]
        print(f"| {p} | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")
    for task in TASKS:
        inside = [p for p in prompts if p.startswith(task)]
        ratios = [
            statistics.median(rate[(p, a)] / rate[(p, b)] for p in inside) for _, a, b in columns
        ]
        print(f"| {task} (median) | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")
    print()


for name in sys.argv[1:]:
    table(Path(__file__).parent / name)
