"""How often the 0.5B draft's top token is the w4a8 1.5B target's, teacher-forced over the
target's own outputs recorded in held-out runs (each output fed alone, from its first
token), for the int8 draft and the all-4-bit w4a8 draft (`make_fast(draft=True)`). A proxy
for acceptance. Nothing else running:

    python benchmarks/draft-w4a8-avx512-2026-12-04/agreement.py RESULTS.jsonl [...]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

from dynaspec.backends.static import make_fast
from dynaspec.models.loading import load_model


def top_tokens(adapter, outputs: list[list[int]]) -> list[torch.Tensor]:
    tops = []
    for ids in outputs:
        tokens = torch.tensor(ids)
        adapter.begin(tokens[None], max_length=512)
        tops.append(adapter.forward(tokens, len(ids)).float().argmax(-1))
    return tops


def main() -> None:
    torch.set_num_threads(2)
    outputs, tasks = [], []
    for path in sys.argv[1:]:
        for line in open(path):
            record = json.loads(line)
            if record["method"] == "target" and record.get("output_ids"):
                outputs.append(record["output_ids"])
                tasks.append(record["task"])
    model = load_model("qwen2.5-coder-1.5b")[0]
    target = top_tokens(make_fast(model, quantize="w4a8", release=True), outputs)
    del model
    for quantize in ("int8", "w4a8"):
        model = load_model("qwen2.5-coder-0.5b")[0]
        draft = top_tokens(make_fast(model, quantize=quantize, draft=True, release=True), outputs)
        del model
        per: dict[str, list[float]] = {}
        for task, want, got in zip(tasks, target, draft, strict=True):
            per.setdefault(task, []).append(float((want == got).float().mean()))
        every = [x for values in per.values() for x in values]
        shown = {task: round(float(np.mean(values)), 3) for task, values in per.items()}
        print(f"{quantize} draft: {shown}, all {np.mean(every):.3f} ({len(every)} outputs)")


if __name__ == "__main__":
    main()
