"""The draft model alone (no prompt lookup) with its one-token forwards in few calls (step)
and layer by layer (layers), per prompt: time, rounds, acceptance and the draft's time per
forward; medians of REPS runs, interleaved.

    python draft_only.py REPS task:seed:prompt ...
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import variants  # noqa: E402

from dynaspec import generate, load_pair  # noqa: E402
from dynaspec.eval import data  # noqa: E402

pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
reps = int(sys.argv[1])
for spec in sys.argv[2:]:
    task, seed, key = spec.split(":", 2)
    prompt = [p for p in data.load_prompts(task, 4, int(seed)) if p.id.startswith(key)][0]
    ids = data.render_prompt(tok, prompt.text, chat=True)
    generate(pair.target, pair.draft, ids[:, :32], max_new_tokens=8)
    times = {"step": [], "layers": []}
    for rep in range(reps):
        for name in times:
            variants.use(name)
            started = time.perf_counter()
            out = generate(pair.target, pair.draft, ids, max_new_tokens=128, eos_token_id=eos)
            times[name].append(time.perf_counter() - started)
            if rep == 0:
                rounds = out.stats.rounds
                drafted = sum(r.num_drafted for r in rounds)
                accepted = sum(r.num_accepted for r in rounds)
                forwards = sum(r.draft_forwards for r in rounds)
                draft_s = sum(r.draft_time_s for r in rounds)
                print(
                    f"  {name}: rounds {len(rounds)}, accepted {accepted}/{drafted}, "
                    f"draft {draft_s / max(forwards, 1) * 1e3:.1f} ms a forward "
                    f"(catch-ups included)",
                    flush=True,
                )
    step, layers = (statistics.median(times[n]) for n in ("step", "layers"))
    print(f"{prompt.id} step={step:.2f}s layers={layers:.2f}s ({layers / step:.2f}x)", flush=True)
