# Quote summaries, offline: copy-only rounds priced by a line fitted to measured forwards
# (0.165 s + 7.7 ms a token; prefill 7.8 ms a token) with fixed caps (longest occurrence) and
# an oracle that copies exactly what the target keeps, against transformers' prompt lookup (10)
# (leftmost occurrence): python sim.py
from look import RUNS, eos, find_match, recorded, LookupConfig
STEP_S, TOKEN_S = 0.165, 0.0077  # a target forward over n tokens: STEP_S + TOKEN_S * n
def T(n): return STEP_S+TOKEN_S*n
def prefill(n): return n*0.0078
def run_policy(tokens, start, pol):
    end=start; cost=0.0; fw=0
    while end<tokens.numel():
        k, match = pol(tokens[:end], end-start)
        run=0; n=1
        if k>0:
            f=find_match(tokens[:end], LookupConfig(k,2,match), eos)
            if f is not None:
                c=f.continuation.tolist(); n+=len(c)
                while run<len(c) and end+run<tokens.numel() and c[run]==tokens[end+run]: run+=1
        cost+=T(n); fw+=1; end+=run+1
    return cost, fw
def oracle(tokens,start):
    # copy exactly the accepted run of the longest match (cap 32), else 1
    end=start; cost=0
    while end<tokens.numel():
        f=find_match(tokens[:end], LookupConfig(32,2,"longest"), eos); run=0
        if f is not None:
            c=f.continuation.tolist()
            while run<len(c) and end+run<tokens.numel() and c[run]==tokens[end+run]: run+=1
        cost+=T(run+1); end+=run+1
    return cost
if __name__ == "__main__":
    for seed, pid, ids, tokens in recorded(RUNS[:2], "lee"):
        s=ids.numel(); P=prefill(s)
        hf,_=run_policy(tokens,s,lambda t,i:(10,"leftmost"))
        res={"hf":hf}
        for K in (10,16,24,32): res[f"L{K}"]=run_policy(tokens,s,lambda t,i,K=K:(K,"longest"))[0]
        res["oracle"]=oracle(tokens,s)
        line=f"{seed} {pid[:8]:8s} P={P:.2f} hf={hf:.2f} "+" ".join(f"{k}={(P+hf)/(P+v):.2f}" for k,v in res.items() if k!='hf')
        print(line, flush=True)
