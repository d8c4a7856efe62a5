import json, sys, torch
from transformers import AutoModelForCausalLM
from dynaspec.eval.mismatch import classify_mismatch
d = json.load(open(sys.argv[1]))
target = AutoModelForCausalLM.from_pretrained(d["config"]["target"], dtype=torch.bfloat16)
torch.set_num_threads(2)
alone = {run["concurrency"]: run["outputs"] for run in d["results"][0]["runs"]}
for res in d["results"][1:]:
    for run in res["runs"]:
        for i, out in enumerate(run["outputs"]):
            ref = alone[run["concurrency"]][i]
            if out == ref:
                continue
            div = classify_mismatch(target, torch.tensor([d["prompts"][i]]), ref, out)
            print(res["method"], run["concurrency"], d["labels"][i], div)
