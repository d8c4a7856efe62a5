# offline: the draft's calibration, acceptance of its teacher-forced argmax per confidence bin
# and task (python calibration.py)
import sys, json, shlex, glob, torch
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "prefill-rows-avx512-2026-12-06" / "offline"))
from look import B, tok, eos, find_match, LookupConfig, load_prompts, render_prompt
from transformers import AutoModelForCausalLM
from dynaspec.models import presets
from dynaspec.models.cache import preset_folder
DRAFT = preset_folder(presets.model_presets()[presets.pair_presets()["qwen2.5-coder"].draft], torch.bfloat16)
draft = AutoModelForCausalLM.from_pretrained(DRAFT, dtype=torch.bfloat16).eval()
dirs = sorted(glob.glob(B + "match-avx512-2026-12-05/ge*/")) + sorted(glob.glob(B + "borrow-avx512-2026-12-05/*ge*/")) + sorted(glob.glob(B + "prefill-rows-avx512-2026-12-06/ge*/"))
seen = set(); agg = {}
for d in dirs:
    path = Path(d) / "results.jsonl"
    if not path.exists(): continue
    command = shlex.split((path.parent / "command.txt").read_text())
    seed = int(command[command.index("--seed") + 1])
    prompts = {p.id: p for p in load_prompts("grounded", 4, seed)}
    for l in path.open():
        r = json.loads(l)
        if r["method"] != "target" or r["prompt_id"] in seen: continue
        seen.add(r["prompt_id"])
        ids = render_prompt(tok, prompts[r["prompt_id"]].text, chat=True)[0]
        tokens = torch.cat([ids, torch.tensor(r["output_ids"])]); s = ids.numel()
        with torch.no_grad():
            logits = draft(tokens[None]).logits[0].float()
        conf = logits.softmax(-1).max(-1).values
        pred = logits.argmax(-1)
        c = {}
        for p in range(s, tokens.numel()):
            dp = int(pred[p - 1]); ok = dp == int(tokens[p]); b = min(int(float(conf[p - 1]) * 10), 9)
            c.setdefault(f"bin{b}", [0, 0]); c[f"bin{b}"][0] += ok; c[f"bin{b}"][1] += 1
        kind = r["prompt_id"].split(":")[1] if ":" in r["prompt_id"] else "?"
        print(f"{seed} {r['prompt_id'][:24]:24s} " + " ".join(f"{k}={a}/{n}" for k, (a, n) in c.items()), flush=True)
        for k, (a, n) in c.items():
            g = agg.setdefault((kind, k), [0, 0]); g[0] += a; g[1] += n
for (kind, k), (a, n) in sorted(agg.items()):
    print(f"{kind:16s} {k:8s} {a}/{n} = {a/max(n,1):.2f}")
