# A/B of the batch adapter's long forwards, widened/padded (the code) against plain: python batch_forwards.py
import time, torch
from transformers import AutoModelForCausalLM
import dynaspec.backends.hf_batch as HB
from dynaspec.models import presets
from dynaspec.models.cache import preset_folder
path = preset_folder(presets.model_presets()[presets.pair_presets()["qwen2.5-coder"].target], torch.bfloat16)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
plain_w, plain_r = (lambda b, w, d, v: w), (lambda n, d, v: n)
code_w, code_r = HB.fed_width, HB.fed_rows
def block(lengths, widen):
    HB.fed_width, HB.fed_rows = (code_w, code_r) if widen else (plain_w, plain_r)
    width = max(lengths)
    ids = torch.stack([torch.cat([torch.zeros(width - n, dtype=torch.long), torch.randint(100, 20000, (n,))]) for n in lengths])
    a = HB.HFBatchAdapter(model); a.begin(ids, (torch.arange(width) >= width - torch.tensor(lengths)[:, None]).long())
    s = time.perf_counter()
    with torch.inference_mode():
        a.forward(list(ids), [1] * len(lengths))
    return time.perf_counter() - s
def join(n, pad):
    HB.fed_width, HB.fed_rows = (code_w, code_r) if pad else (plain_w, plain_r)
    a = HB.HFBatchAdapter(model)
    s = time.perf_counter()
    with torch.inference_mode():
        a.prefill(torch.randint(100, 20000, (n,)))
    return time.perf_counter() - s
block([40, 40], True)
for lengths in ([231, 262, 301], [362, 379], [173, 211, 226, 245, 197]):
    r = {w: min(block(lengths, w) for _ in range(3)) for w in (False, True)}
    print(f"block {lengths} (B x W = {len(lengths) * max(lengths)}): plain {r[False]:.3f} s, widened {r[True]:.3f} s, ratio {r[True] / r[False]:.3f}", flush=True)
for n in (230, 261, 301, 365, 407):
    r = {p: min(join(n, p) for _ in range(3)) for p in (False, True)}
    print(f"join prefill {n}: plain {r[False]:.3f} s, padded {r[True]:.3f} s, ratio {r[True] / r[False]:.3f}", flush=True)
