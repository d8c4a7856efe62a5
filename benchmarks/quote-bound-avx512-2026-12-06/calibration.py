# offline: the draft's calibration, acceptance of its teacher-forced argmax per confidence bin
# and task (python calibration.py)
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefill-rows-avx512-2026-12-06" / "offline"))
from look import RUNS, draft_model, teacher_forced, recorded
draft = draft_model()
agg = {}
for seed, pid, ids, tokens in recorded(RUNS):
    s = ids.numel()
    pred, conf = teacher_forced(draft, tokens)
    c = {}
    for p in range(s, tokens.numel()):
        dp = int(pred[p - 1]); ok = dp == int(tokens[p]); b = min(int(float(conf[p - 1]) * 10), 9)
        c.setdefault(f"bin{b}", [0, 0]); c[f"bin{b}"][0] += ok; c[f"bin{b}"][1] += 1
    kind = pid.split(":")[1] if ":" in pid else "?"
    print(f"{seed} {pid[:24]:24s} " + " ".join(f"{k}={a}/{n}" for k, (a, n) in c.items()), flush=True)
    for k, (a, n) in c.items():
        g = agg.setdefault((kind, k), [0, 0]); g[0] += a; g[1] += n
for (kind, k), (a, n) in sorted(agg.items()):
    print(f"{kind:16s} {k:8s} {a}/{n} = {a/max(n,1):.2f}")
