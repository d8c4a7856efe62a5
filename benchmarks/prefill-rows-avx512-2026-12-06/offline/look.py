# Helpers: the target's outputs of a bench run with their prompts, and a walk of cap-32 copies
# from the occurrence that agrees furthest back (python look.py RUN_DIR PROMPT_ID)
import json, sys, shlex, glob
from pathlib import Path
import torch
from transformers import AutoTokenizer
from dynaspec.drafters.prompt_lookup import LookupConfig, find_match
from dynaspec.eval.data import load_prompts, render_prompt
from dynaspec.models import presets
from dynaspec.models.cache import preset_folder
target = presets.pair_presets()["qwen2.5-coder"].target
tok = AutoTokenizer.from_pretrained(preset_folder(presets.model_presets()[target], torch.bfloat16))
eos = torch.tensor(sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")}))
B = str(Path(__file__).resolve().parents[2]) + "/"
def load(run, pid):
    path=Path(B)/run/"results.jsonl"
    command = shlex.split((path.parent / "command.txt").read_text())
    seed = int(command[command.index("--seed") + 1])
    prompts = {p.id: p for p in load_prompts("grounded", 4, seed)}
    for l in path.open():
        r=json.loads(l)
        if r["method"]=="target" and r["prompt_id"]==pid:
            ids = render_prompt(tok, prompts[pid].text, chat=True)[0]
            return ids, torch.tensor(r["output_ids"])
def walk(ids, out, cap=32):
    tokens=torch.cat([ids,out]); start=ids.numel(); end=start; rows=[]
    while end < tokens.numel():
        f=find_match(tokens[:end], LookupConfig(cap,2,"longest"), eos)
        run=0
        if f is not None:
            c=f.continuation.tolist()
            while run<len(c) and end+run<tokens.numel() and c[run]==tokens[end+run]: run+=1
            rows.append((end-start, f.agreement, len(c), run, tok.decode(tokens[end:end+run+1]), tok.decode(c[run:run+6]) ))
        else:
            rows.append((end-start,None,0,0,tok.decode(tokens[end:end+1]),""))
        end+=run+1
    return rows
if __name__=="__main__":
    run,pid=sys.argv[1],sys.argv[2]
    ids,out=load(run,pid)
    print(tok.decode(out))
    print("-----")
    for r in walk(ids,out): print(r)
