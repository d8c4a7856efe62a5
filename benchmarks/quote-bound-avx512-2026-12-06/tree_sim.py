# offline: copy trees (several occurrences' continuations verified in one forward) against one
# copy, priced by the fitted line; python tree_sim.py
import sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefill-rows-avx512-2026-12-06" / "offline"))
from look import RUNS, recorded
from sim import T, prefill, run_policy
def candidates(tokens, maxsize=3):
    total=tokens.numel(); out=[]; seen=set()
    for size in range(min(maxsize,total-1),0,-1):
        windows=tokens[:-1].unfold(0,size,1)
        starts=(windows==tokens[total-size:]).all(1).nonzero().flatten()+size
        if not starts.numel(): continue
        # agreement: count back
        ag=[]
        for s in starts.tolist():
            a=0
            while a<64 and s-1-a>=0 and tokens[s-1-a]==tokens[total-1-a]: a+=1
            ag.append((a,s))
        ag.sort(key=lambda x:(-x[0],-x[1]))
        for a,s in ag:
            c=tuple(tokens[s:s+32].tolist())
            if c and c not in seen: seen.add(c); out.append((a,c))
    return out
def tree_nodes(cands):
    nodes=set()
    for c in cands:
        for i in range(1,len(c)+1): nodes.add(c[:i])
    return nodes
def run_tree(tokens,start,k,depth):
    end=start; cost=0.0; fw=0
    while end<tokens.numel():
        cs=candidates(tokens[:end])
        chosen=[c[:depth] for a,c in cs[:k]]
        nodes=tree_nodes(chosen)
        n=len(nodes)
        run=0
        truth=tuple(tokens[end:end+depth].tolist())
        for i in range(1,len(truth)+1):
            if truth[:i] in nodes: run=i
            else: break
        cost+=T(n+1); fw+=1; end+=run+1
    return cost,fw
for seed, pid, ids, tokens in recorded(RUNS):
    s=ids.numel()
    P=prefill(s)
    hf,hfw=run_policy(tokens,s,lambda t,i:(10,"leftmost"))
    res={}
    for k,d in ((1,10),(2,10),(4,10),(4,6),(8,6),(1,16),(2,16),(4,16)):
        res[f"k{k}d{d}"]=run_tree(tokens,s,k,d)
    line=f"{seed} {pid[:14]:14s} P={P:.2f} hf={hf:.2f}/{hfw} "+" ".join(f"{kk}={(P+hf)/(P+v[0]):.2f}/{v[1]}" for kk,v in res.items())
    print(line, flush=True)
