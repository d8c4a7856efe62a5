"""A/B of planner variants, with transformers' prompt lookup (10) as the base, per prompt."""

import statistics
import sys
import time

import variants

from dynaspec import generate, load_pair
from dynaspec.eval import data
from dynaspec.eval.hf_peer import HFPeer

pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
names = sys.argv[1].split(",")
reps = int(sys.argv[2])
for spec in sys.argv[3:]:
    task, seed, key = spec.split(":", 2)
    p = [p for p in data.load_prompts(task, 4, int(seed)) if p.id.startswith(key)][0]
    ids = data.render_prompt(tok, p.text, chat=True)
    generate(pair.target, pair.draft, ids[:, :32], max_new_tokens=8, prompt_lookup_num_tokens=32)
    res = {n: [] for n in names}
    outs = {}
    for rep in range(reps):
        for n in names:
            t = time.perf_counter()
            if n == "hf":
                o = HFPeer(pair.target).generate(
                    ids,
                    max_new_tokens=128,
                    eos_token_id=eos,
                    pad_token_id=eos[0],
                    prompt_lookup_num_tokens=10,
                )
                seq = o.sequences[0, ids.shape[1] :].tolist()
                nr = o.target_forwards
            else:
                variants.use(n)
                kw = {} if n == "model" else {"prompt_lookup_num_tokens": 32}
                draft = None if n == "lookup" else pair.draft
                o = generate(
                    pair.target, draft, ids, max_new_tokens=128, eos_token_id=eos, **kw
                )
                seq = o.sequences[0, ids.shape[1] :].tolist()
                nr = len(o.stats.rounds)
            res[n].append(time.perf_counter() - t)
            outs[n] = seq
            if rep == 0:
                print(f"  {n} {res[n][-1]:.2f}s rounds {nr}", flush=True)
    med = {n: statistics.median(v) for n, v in res.items()}
    base = med.get("hf") or med.get("model") or med[names[0]]
    same = {n: outs[n] == outs[names[0]] for n in names}
    print(
        p.id,
        " ".join(
            f"{n}={med[n]:.2f}s({base / med[n]:.2f}x{'' if same[n] else ',diff'})" for n in names
        ),
        flush=True,
    )
variants.use("base")
