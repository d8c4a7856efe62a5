# offline: the draft's first-token acceptance when it agrees with the lookup continuation's
# first token, and when it does not (teacher-forced draft on the target's own outputs)
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefill-rows-avx512-2026-12-06" / "offline"))
from look import RUNS, draft_model, teacher_forced, eos, find_match, recorded, LookupConfig
draft = draft_model()
agg = {}
for seed, pid, ids, tokens in recorded(RUNS):
    s = ids.numel()
    pred, conf = teacher_forced(draft, tokens)
    c = {"same": [0, 0], "diff": [0, 0], "none": [0, 0], "same_hi": [0, 0], "diff_hi": [0, 0]}
    for p in range(s, tokens.numel()):
        f = find_match(tokens[:p], LookupConfig(32, 2, "longest"), eos)
        dp = int(pred[p - 1]); ok = dp == int(tokens[p]); hi = float(conf[p - 1]) > 0.8
        key = "none" if f is None else ("same" if int(f.continuation[0]) == dp else "diff")
        c[key][0] += ok; c[key][1] += 1
        if key != "none" and hi: c[key + "_hi"][0] += ok; c[key + "_hi"][1] += 1
    kind = pid.split(":")[1] if ":" in pid else "?"
    print(f"{seed} {pid[:24]:24s} " + " ".join(f"{k}={a}/{n}" for k, (a, n) in c.items()), flush=True)
    for k, (a, n) in c.items():
        g = agg.setdefault((kind, k), [0, 0]); g[0] += a; g[1] += n
for (kind, k), (a, n) in sorted(agg.items()):
    print(f"{kind:16s} {k:8s} {a}/{n} = {a/max(n,1):.2f}")
