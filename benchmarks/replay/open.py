"""Open-ended prompts on the replay target: the hybrid against the draft model alone with the
text held fixed (the target's recorded output), the real w4a8 draft in both, REPS runs of
each, interleaved (the first method alternating); per prompt the ratio of the medians.

    python open.py REPS [VARIANT]

VARIANT: one of variants.py's, in the hybrid (default: code).
"""

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay  # noqa: E402  (patches the clocks before dynaspec's loop runs)
import variants  # noqa: E402

from dynaspec import generate, load_pair  # noqa: E402

reps = int(sys.argv[1])
variants.use(sys.argv[2] if len(sys.argv) > 2 else "code")
pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
cases = list(replay.recorded(tok, "open-ended"))
generate(
    pair.target, pair.draft, cases[0][2][None, :32], max_new_tokens=8, prompt_lookup_num_tokens=32
)
ratios = []
for seed, key, ids, out in cases:
    sequence = torch.cat([ids, out])
    seconds = {"hybrid": [], "model": []}
    rounds = {"hybrid": [], "model": []}
    for rep in range(reps):
        for name in ("hybrid", "model") if rep % 2 == 0 else ("model", "hybrid"):
            lookup = {"prompt_lookup_num_tokens": 32} if name == "hybrid" else {}
            target = replay.Replay(sequence, pair.target.vocab_size, eos[0])
            started = replay.clock()
            o = generate(
                target,
                pair.draft,
                ids[None],
                max_new_tokens=out.numel(),
                eos_token_id=eos,
                **lookup,
            )
            seconds[name].append(replay.clock() - started)
            rounds[name].append(len(o.stats.rounds))
            assert o.sequences[0, ids.numel() :].tolist() == out.tolist(), key
    hybrid, model = (statistics.median(seconds[n]) for n in ("hybrid", "model"))
    ratios.append(model / hybrid)
    spread = [m / h for m in seconds["model"] for h in seconds["hybrid"]]
    print(
        f"{seed} {key:14s} new {out.numel():3d}  hybrid {hybrid:5.2f}s model {model:5.2f}s "
        f"**{model / hybrid:.3f}x** (pairs {min(spread):.2f}-{max(spread):.2f}), rounds "
        f"{statistics.median(rounds['hybrid']):.0f} / {statistics.median(rounds['model']):.0f}",
        flush=True,
    )
print(
    f"hybrid / draft alone: median {statistics.median(ratios):.3f}x, >= 0.95x on "
    f"{sum(r >= 0.95 for r in ratios)}/{len(ratios)}, lowest {min(ratios):.3f}x"
)
