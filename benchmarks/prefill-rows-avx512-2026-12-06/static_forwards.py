# The static path (prepacked bf16 weights) over n tokens, padded to a multiple of 4 rows or not (run at a patch that padded it too)
import time, torch, statistics
import dynaspec
from dynaspec.backends import static as S
m = dynaspec.load_model("qwen2.5-coder-1.5b", static=True)[0]
plain = lambda n, d, dev: n
orig = S.fed_rows
torch.manual_seed(0)
res={}
for rep in range(2):
    for n in (365, 366, 407, 408, 451, 452, 301, 302):
        for name, f in (("pad", orig), ("nopad", plain)):
            S.fed_rows = f
            ids = torch.randint(100, 20000, (1, n))
            m.begin(ids, max_length=n + 16)
            t=time.perf_counter(); m.forward(ids[0], 1); dt=time.perf_counter()-t
            res.setdefault((n,name),[]).append(dt)
for k,v in sorted(res.items()): print(k, round(min(v),3))
