"""The bf16 target's forward over N random prompt tokens, at once and in chunks: seconds and ms a
token (median of three), and the last logits' largest difference from the one-forward ones.

    python prefill_chunks.py [N]
"""

import sys
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache

from dynaspec.paths import default_cache_dir

folder = next((default_cache_dir() / "hf").glob("qwen2.5-coder-1.5b-*"))
m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
torch.manual_seed(0)
N = int(sys.argv[1]) if len(sys.argv) > 1 else 292
ids = torch.randint(100, 20000, (1, N))


def run(chunk):
    cache = DynamicCache()
    t = time.perf_counter()
    with torch.inference_mode():
        for s in range(0, N, chunk):
            out = m(
                input_ids=ids[:, s : s + chunk],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.past_key_values
    return time.perf_counter() - t, out.logits[0, -1].float()


run(N)
res = {}
for rep in range(3):
    for chunk in (N, 148, 96, 64, 32, 16):
        dt, lg = run(chunk)
        res.setdefault(chunk, []).append(dt)
        if rep == 0:
            res.setdefault("lg", {})[chunk] = lg
base = res["lg"][N]
for chunk in (N, 148, 96, 64, 32, 16):
    v = sorted(res[chunk])
    diff = (res["lg"][chunk] - base).abs().max()
    same = res["lg"][chunk].argmax() == base.argmax()
    print(f"chunk {chunk:4d}: {v[1]:.2f}s ({v[1] / N * 1000:.1f} ms/token)", end=" ")
    print(f"maxdiff {diff:.3g} argmax same {bool(same)}")
