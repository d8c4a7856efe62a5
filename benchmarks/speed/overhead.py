"""The decoding loop's own overhead per round: wall time outside model forwards.

Run: python benchmarks/speed/overhead.py   (tiny built-in fp32 models, CPU, a few seconds)
"""

import statistics

import torch

import dynaspec
from dynaspec.models.tiny import tiny_pair

torch.set_num_threads(1)
target, draft, tokenizer = tiny_pair()
ids = tokenizer("def fibonacci(n):", return_tensors="pt").input_ids
for schedule in ("dynamic", "constant", "adaptive"):
    dynaspec.generate(target, draft, ids, max_new_tokens=16, eos_token_id=[])  # warm-up
    runs = [
        dynaspec.generate(
            target,
            draft,
            ids,
            max_new_tokens=256,
            eos_token_id=[],
            num_assistant_tokens_schedule=schedule,
        ).stats
        for _ in range(3)
    ]
    per_round = [r.other_time_s for s in runs for r in s.rounds]
    forwards = [r.draft_time_s + r.target_time_s for s in runs for r in s.rounds]
    print(
        f"{schedule:9s} rounds {len(per_round):4d}  overhead/round median "
        f"{statistics.median(per_round) * 1e3:.3f} ms  (model forwards/round median "
        f"{statistics.median(forwards) * 1e3:.2f} ms)"
    )
target_alone = dynaspec.generate(target, None, ids, max_new_tokens=256, eos_token_id=[]).stats
print(
    f"target alone: overhead/round median "
    f"{statistics.median(r.other_time_s for r in target_alone.rounds) * 1e3:.3f} ms"
)
