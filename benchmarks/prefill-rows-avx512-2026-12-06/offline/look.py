# Helpers: the target's outputs of bench runs with their prompts, the bf16 draft, and a walk of
# cap-32 copies from the occurrence that agrees furthest back (python look.py RUN_DIR PROMPT_ID)
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
    # the prompt ids and the target's own output of `pid` in the run folder `run`
    for _, found, ids, tokens in recorded((run,), pid):
        if found == pid:
            return ids, tokens[ids.numel():]
RUNS = ("match-avx512-2026-12-05/ge*", "borrow-avx512-2026-12-05/*ge*", "prefill-rows-avx512-2026-12-06/ge*")
def recorded(runs=RUNS, want=""):
    # (seed, prompt id, prompt ids (n,), prompt + the target's own output (n + m,)) of each
    # grounded prompt whose id starts with `want` in the runs' results, once (the first run's)
    seen = set()
    for pattern in runs:
        for path in sorted(Path(B).glob(pattern + "/results.jsonl")):
            command = shlex.split((path.parent / "command.txt").read_text())
            if "grounded" not in command: continue
            seed = int(command[command.index("--seed") + 1])
            prompts = {p.id: p for p in load_prompts("grounded", 4, seed)}
            for l in path.open():
                r = json.loads(l)
                pid = r["prompt_id"]
                if r["method"] != "target" or not pid.startswith(want) or pid in seen: continue
                seen.add(pid)
                ids = render_prompt(tok, prompts[pid].text, chat=True)[0]
                yield seed, pid, ids, torch.cat([ids, torch.tensor(r["output_ids"])])
def draft_model():
    # the pair's 0.5B draft in bf16, as transformers loads it (teacher-forced studies)
    from transformers import AutoModelForCausalLM
    draft = presets.pair_presets()["qwen2.5-coder"].draft
    folder = preset_folder(presets.model_presets()[draft], torch.bfloat16)
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).eval()
def teacher_forced(draft, tokens):
    # (n,) the draft's argmax after each prefix of `tokens` (n,) (entry i guesses token i + 1),
    # and (n,) its probability
    with torch.no_grad():
        logits = draft(tokens[None]).logits[0].float()
    return logits.argmax(-1), logits.softmax(-1).max(-1).values
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
