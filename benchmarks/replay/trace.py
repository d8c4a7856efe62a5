"""One open-ended prompt on the replay target, the hybrid and the draft alone, twice each: the
rounds (copied c, model m > accepted [agreement], g guessed / draft ms):

    python trace.py SEED:PROMPT_ID      e.g. 33:mt_bench/125
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay  # noqa: E402  (patches the clocks before dynaspec's loop runs)

from dynaspec import generate, load_pair  # noqa: E402

pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
seed, key = sys.argv[1].split(":", 1)
_, _, ids, out = next(
    c for c in replay.recorded(tok, "open-ended", key) if c[:2] == (int(seed), key)
)
sequence = torch.cat([ids, out])
generate(pair.target, pair.draft, ids[None, :32], max_new_tokens=8, prompt_lookup_num_tokens=32)
for name, lookup in (("hybrid", {"prompt_lookup_num_tokens": 32}), ("model", {})) * 2:
    target = replay.Replay(sequence, pair.target.vocab_size, eos[0])
    started = replay.clock()
    o = generate(
        target, pair.draft, ids[None], max_new_tokens=out.numel(), eos_token_id=eos, **lookup
    )
    print(f"{name} {replay.clock() - started:.2f}s, {len(o.stats.rounds)} rounds")
    print(
        " ".join(
            f"{r.num_copied}c{r.num_model}m>{r.num_accepted}"
            + (f"[ag{r.agreement}]" if r.num_copied else "")
            + (f"g{r.guess_fed}" if r.guess_fed else "")
            + f"/{r.draft_time_s * 1000:.0f}"
            for r in o.stats.rounds
        )
    )
