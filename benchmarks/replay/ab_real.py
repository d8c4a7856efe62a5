"""The real target (no replay): the hybrid without and with copies checked by the draft, and
transformers' prompt lookup (10), REPS interleaved runs each (the order rotating), per
prompt the medians' ratios; then each distinct output against the target alone's (greedy,
transformers' generate), its first difference classified (dynaspec/mismatch.py: a tie or a BUG):

    python ab_real.py REPS seed:prompt_id ...   (grounded prompts)

AB_VARIANTS=noshare,code compares two other variants of variants.py (default nocheck,code);
the last line's ratio is the first one's time over the second's.
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import variants  # noqa: E402  (no replay: the real target, the real clock)

from dynaspec import generate, load_pair  # noqa: E402
from dynaspec.eval import data  # noqa: E402
from dynaspec.prompts import render_prompt  # noqa: E402
from dynaspec.eval.hf_peer import HFPeer  # noqa: E402
from dynaspec.mismatch import classify_mismatch  # noqa: E402

reps = int(sys.argv[1])
pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
first, second = os.environ.get("AB_VARIANTS", "nocheck,code").split(",")
names = (first, second, "hf")
for spec in sys.argv[2:]:
    seed, key = spec.split(":", 1)
    prompt = next(p for p in data.load_prompts("grounded", 4, int(seed)) if p.id.startswith(key))
    ids = render_prompt(tok, prompt.text, chat=True)
    generate(pair.target, pair.draft, ids[:, :32], max_new_tokens=8, prompt_lookup_num_tokens=32)
    seconds, outputs, rounds = (
        {n: [] for n in names},
        {n: set() for n in names},
        {n: [] for n in names},
    )
    for rep in range(reps):
        for name in names[rep % 3 :] + names[: rep % 3]:
            started = time.perf_counter()
            if name == "hf":
                o = HFPeer(pair.target).generate(
                    ids,
                    max_new_tokens=128,
                    eos_token_id=eos,
                    pad_token_id=eos[0],
                    prompt_lookup_num_tokens=10,
                )
                rounds[name].append(o.target_forwards)
            else:
                variants.use(name)
                o = generate(
                    pair.target,
                    pair.draft,
                    ids,
                    max_new_tokens=128,
                    eos_token_id=eos,
                    prompt_lookup_num_tokens=32,
                )
                rounds[name].append(len(o.stats.rounds))
            seconds[name].append(time.perf_counter() - started)
            outputs[name].add(tuple(o.sequences[0, ids.shape[1] :].tolist()))
    med = {n: statistics.median(v) for n, v in seconds.items()}
    alone = (
        HFPeer(pair.target)
        .generate(ids, max_new_tokens=128, eos_token_id=eos, pad_token_id=eos[0])
        .sequences[0, ids.shape[1] :]
        .tolist()
    )
    notes = []
    for name in names:
        for output in sorted(outputs[name]):
            if list(output) != alone:
                d = classify_mismatch(pair.target, ids, alone, list(output))
                steps = "?" if d.steps is None else f"{d.steps:.1f}"
                notes.append(f"{name}: new token {d.position}, {d.kind} ({steps} steps)")
    print(
        f"{seed} {prompt.id}: "
        + "  ".join(
            f"{n} {med[n]:.2f}s ({statistics.median(rounds[n]):.0f} forwards) "
            f"{med['hf'] / med[n]:.3f}x"
            for n in names
        )
        + f"  {second} / {first} {med[first] / med[second]:.3f}"
        + f"; outputs {sum(len(v) for v in outputs.values())}, against the target alone: "
        + ("; ".join(notes) or "all the same"),
        flush=True,
    )
