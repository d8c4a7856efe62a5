# offline bound: the best any hybrid policy could do with this draft and copies (an oracle
# that knows how far each source agrees with the target's output), forwards priced by the
# fitted line, against transformers' prompt lookup (10) priced the same way
import sys, functools
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefill-rows-avx512-2026-12-06" / "offline"))
from look import RUNS, draft_model, teacher_forced, eos, find_match, recorded, LookupConfig
from sim import T, prefill, run_policy
D_STEP, D_TOK = 0.018, 0.00235  # draft: s per drafted token, s per catch-up token
draft = draft_model()
def runs(tokens, start):
    total = tokens.numel()
    pred, _ = teacher_forced(draft, tokens)  # pred[i]: the draft's guess of token i+1
    ok = (pred[:-1] == tokens[1:]).tolist()  # ok[i]: guess of token i+1 right
    dr = [0] * (total + 1)
    for p in range(total - 1, start - 1, -1):  # dr[p]: draft's run drafting token p onward
        dr[p] = dr[p + 1] + 1 if ok[p - 1] else 0
    cp = [0] * (total + 1)
    for p in range(start, total):
        f = find_match(tokens[:p], LookupConfig(32, 2, "longest"), eos)
        if f is not None:
            c = f.continuation.tolist(); r = 0
            while r < len(c) and p + r < total and c[r] == tokens[p + r]: r += 1
            cp[p] = r
    return dr, cp
def oracle(tokens, start, dr, cp, use_draft=True, use_copy=True, cap=32):
    total = tokens.numel()
    @functools.lru_cache(None)
    def best(p, started):
        if p >= total: return 0.0
        opts = [T(1) + best(p + 1, started)]
        a = min(cp[p], cap) if use_copy else 0
        if a:
            opts.append(T(a + 1) + best(p + a + 1, started))
        if use_draft:
            start_cost = 0.0 if started else D_TOK * p
            for k in ([0, a] if a else [0]):
                n = min(dr[p + k], cap - k) if p + k < total else 0
                if n:
                    opts.append(start_cost + n * D_STEP + T(k + n + 1) + best(p + k + n + 1, True))
        return min(opts)
    sys.setrecursionlimit(10000)
    return best(start, False)
want = sys.argv[1] if len(sys.argv) > 1 else "lee"
for seed, pid, ids, tokens in recorded(RUNS, want):
    s = ids.numel()
    P = prefill(s); hf = run_policy(tokens, s, lambda t, i: (10, "leftmost"))[0]
    dr, cp = runs(tokens, s)
    o_h = oracle(tokens, s, dr, cp); o_c = oracle(tokens, s, dr, cp, use_draft=False)
    o_d = oracle(tokens, s, dr, cp, use_copy=False)
    print(f"{seed} {pid[:12]:12s} prompt {s} new {tokens.numel()-s} P={P:.2f} hf={hf:.2f} "
          f"oracle hybrid {(P+hf)/(P+o_h):.2f} copy-only {(P+hf)/(P+o_c):.2f} draft-only {(P+hf)/(P+o_d):.2f} "
          f"draft mean run {sum(dr[s:tokens.numel()])/(tokens.numel()-s):.1f}", flush=True)
