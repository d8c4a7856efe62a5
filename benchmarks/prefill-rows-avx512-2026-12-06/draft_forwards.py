# The 4-bit draft (w4a8 kernel, static path) over n tokens: a first forward (a catch-up), min of 2 runs
import time, torch
import dynaspec
pair = dynaspec.load_pair("qwen2.5-coder", draft_quantize="w4a8")
d = pair.draft
torch.manual_seed(0)
res={}
for rep in range(2):
    for n in list(range(361,373))+[407,408,451,452]:
        ids = torch.randint(100, 20000, (1, n))
        d.begin(ids, max_length=n + 16)
        t=time.perf_counter(); d.forward(ids[0], 1); dt=time.perf_counter()-t
        res.setdefault(n,[]).append(dt)
print(" ".join(f"{n}:{min(v):.3f}" for n,v in sorted(res.items())))
