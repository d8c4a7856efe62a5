"""The hybrid against the draft model alone on open-ended prompts, REPS interleaved runs each
(the order of the two alternating), one process, the ratio of their median tokens per
second; every run's time, rounds and output to
OUT (JSON lines):

    python open_repeat.py REPS OUT seed:prompt_id ...
"""

import json
import statistics
import sys
import time

from dynaspec import generate, load_pair
from dynaspec.eval import data

METHODS = {"hybrid": {"prompt_lookup_num_tokens": 32}, "model": {}}

pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
reps = int(sys.argv[1])
generate(pair.target, pair.draft, tok("warm up", return_tensors="pt").input_ids, max_new_tokens=8)


def measure(out, seed: str, key: str) -> None:
    prompt = next(p for p in data.load_prompts("open-ended", 4, int(seed)) if p.id == key)
    ids = data.render_prompt(tok, prompt.text, chat=True)
    runs = {name: [] for name in METHODS}  # tokens per second
    for rep in range(reps):
        order = list(METHODS) if rep % 2 == 0 else list(reversed(METHODS))
        for name in order:
            start = time.perf_counter()
            result = generate(
                pair.target,
                pair.draft,
                ids,
                max_new_tokens=128,
                eos_token_id=eos,
                **METHODS[name],
            )
            wall = time.perf_counter() - start
            new = result.sequences[0, ids.shape[1] :].tolist()
            runs[name].append(len(new) / wall)
            record = {
                "seed": int(seed),
                "prompt_id": key,
                "method": name,
                "rep": rep,
                "wall_s": wall,
                "new_tokens": len(new),
                "rounds": len(result.stats.rounds),
                "output": new,
            }
            out.write(json.dumps(record) + "\n")
            out.flush()
    ratio = statistics.median(runs["hybrid"]) / statistics.median(runs["model"])
    print(
        f"{key} (seed {seed}): hybrid / model {ratio:.2f}x "
        f"tok/s: hybrid {min(runs['hybrid']):.1f}-{max(runs['hybrid']):.1f}, "
        f"model {min(runs['model']):.1f}-{max(runs['model']):.1f}",
        flush=True,
    )


with open(sys.argv[2], "a") as out:
    for spec in sys.argv[3:]:
        measure(out, *spec.split(":", 1))
