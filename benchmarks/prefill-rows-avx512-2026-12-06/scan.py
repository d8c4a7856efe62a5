# The summed time of the 1.5B target's linear shapes (q/o, k/v, gate/up, down per layer; random bf16
# weights and inputs) for each row count M: python scan.py 16 1100 1 scan.json
import torch, time, statistics, sys, json
shapes=[(1536,1536),(1536,256),(1536,8960),(8960,1536)]
Ws=[torch.randn(o,i,dtype=torch.bfloat16) for i,o in shapes]
mult=[2,2,2,1]  # q+o, k+v, up+gate, down per layer
def tm(f, reps=3):
    f(); ts=[]
    for _ in range(reps):
        s=time.perf_counter(); f(); ts.append(time.perf_counter()-s)
    return min(ts)
res={}
for M in range(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])):
    tot=0
    for (i,o),W,k in zip(shapes,Ws,mult):
        x=torch.randn(M,i,dtype=torch.bfloat16)
        tot+=k*tm(lambda: torch.nn.functional.linear(x,W))
    res[M]=tot
json.dump(res, open(sys.argv[4],"w"))
