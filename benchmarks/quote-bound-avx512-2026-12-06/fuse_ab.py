# A/B (a patch not kept): the w4a8 draft's one-token step with q/k/v and gate/up joined into one
# w4a8 call each (quant.joined, applied in decoder.py) against apart; run at that patch: python fuse_ab.py
import time, torch
from transformers import AutoModelForCausalLM
from dynaspec.backends import decoder as D
from dynaspec.backends.static import make_fast
from dynaspec.models import presets
from dynaspec.models.cache import preset_folder
path = preset_folder(presets.model_presets()[presets.pair_presets()["qwen2.5-coder"].draft], torch.bfloat16)
def build(join):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
    if not join:
        D.joined = lambda layers: None
    fast = make_fast(model, static=True, quantize="w4a8", draft=True)
    D.joined = JOINED
    return fast
JOINED = D.joined
variants = {"joined": build(True), "apart": build(False)}
ids = torch.randint(100, 20000, (1, 300))
for v in variants.values():
    v.begin(ids, max_length=600); v.forward(ids[0], 1)
tok = torch.tensor([123])
def step(v, n=50):
    t = time.perf_counter()
    for _ in range(n): v.forward(tok, 1); v.crop(v.num_cached - 1)
    return (time.perf_counter() - t) / n * 1e3
a = {k: step(v) for k, v in variants.items()}
la, lb = variants["joined"].forward(tok, 1), variants["apart"].forward(tok, 1)
print("logits bitwise equal:", torch.equal(la, lb))
res = {k: [] for k in variants}
for rep in range(10):
    for k, v in variants.items(): res[k].append(step(v))
for k, r in res.items(): print(k, "median ms", sorted(r)[5], "min", min(r))
