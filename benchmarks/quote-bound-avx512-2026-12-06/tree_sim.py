# offline: copy trees (several occurrences' continuations verified in one forward) against one
# copy, priced by the fitted line; python tree_sim.py
import sys, json, shlex, glob, torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefill-rows-avx512-2026-12-06" / "offline"))
from look import B, tok, eos, find_match, LookupConfig, load_prompts, render_prompt

BB=B
A_,B_=0.165,0.0077
def T(n): return A_+B_*n
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
def run_tree(tokens,start,k,depth,budget):
    end=start; cost=0.0; fw=0
    while end<tokens.numel():
        cs=candidates(tokens[:end])
        chosen=[c[:depth] for a,c in cs[:k]]
        nodes=tree_nodes(chosen)
        # trim to budget by keeping the first candidate full
        n=len(nodes)
        run=0
        truth=tuple(tokens[end:end+depth].tolist())
        for i in range(1,len(truth)+1):
            if truth[:i] in nodes: run=i
            else: break
        cost+=T(n+1); fw+=1; end+=run+1
    return cost,fw
rows=[]
for path in sorted(glob.glob(B + "match-avx512-2026-12-05/ge*/results.jsonl"))+sorted(glob.glob(B + "borrow-avx512-2026-12-05/*ge*/results.jsonl"))+sorted(glob.glob(B+"prefill-rows-avx512-2026-12-06/ge*/results.jsonl")):
    path=Path(path)
    command = shlex.split((path.parent / "command.txt").read_text())
    if "grounded" not in command: continue
    seed = int(command[command.index("--seed") + 1])
    prompts = {p.id: p for p in load_prompts("grounded", 4, seed)}
    seen=set()
    for l in path.open():
        r=json.loads(l)
        if r["method"]!="target" or r["prompt_id"] in seen: continue
        seen.add(r["prompt_id"])
        ids = render_prompt(tok, prompts[r["prompt_id"]].text, chat=True)[0]
        tokens=torch.cat([ids, torch.tensor(r["output_ids"])]); s=ids.numel()
        P=prefill(s)
        hf,hfw=run_policy(tokens,s,lambda t,i:(10,"leftmost"))
        res={}
        for k,d in ((1,10),(2,10),(4,10),(4,6),(8,6),(1,16),(2,16),(4,16)):
            res[f"k{k}d{d}"]=run_tree(tokens,s,k,d,None)
        line=f"{seed} {r['prompt_id'][:14]:14s} P={P:.2f} hf={hf:.2f}/{hfw} "+" ".join(f"{kk}={(P+hf)/(P+v[0]):.2f}/{v[1]}" for kk,v in res.items())
        print(line, flush=True)
