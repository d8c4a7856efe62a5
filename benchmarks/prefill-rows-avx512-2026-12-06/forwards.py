# A whole forward of the eager bf16 1.5B target over n and n + 1 tokens (n: a slow count in scan.json)
import time, torch, statistics
import dynaspec
pair = dynaspec.load_pair("qwen2.5-coder")
m = pair.target
sizes=[259, 265, 275, 287, 301, 325, 329, 343, 355, 365, 371, 385, 407, 451, 473, 481, 178, 382]
torch.manual_seed(0)
res={}
with torch.no_grad():
    for rep in range(2):
        for n in sizes:
            for k in (n, n+1):
                ids = torch.randint(100, 20000, (1, k))
                t=time.perf_counter(); m(ids, use_cache=True, logits_to_keep=1); dt=time.perf_counter()-t
                res.setdefault(k,[]).append(dt)
for n in sizes:
    a=min(res[n]); b=min(res[n+1])
    print(n, f"{a:.3f}", n+1, f"{b:.3f}", f"saving {100*(a-b)/a:.1f}%")
