"""Grounded prompts on the replay target: each variant's (prefill + transformers' prompt
lookup (10)) / its own time, per prompt, all priced on replay.py's line.

    python grounded.py VARIANTS [PROMPT_PREFIX] [--draft]

--draft: the hybrid (the real w4a8 0.5B draft, its real time); without: prompt lookup alone.
"""

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay  # noqa: E402  (patches the clocks before dynaspec's loop runs)
import variants  # noqa: E402

from dynaspec import generate, load_pair  # noqa: E402

names = sys.argv[1].split(",")
prefix = sys.argv[2] if len(sys.argv) > 2 and not sys.argv[2].startswith("--") else ""
pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
draft = pair.draft if "--draft" in sys.argv else None
tok = pair.tokenizer
eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
cases = list(replay.recorded(tok, "grounded", prefix))
generate(pair.target, draft, cases[0][2][None, :32], max_new_tokens=8, prompt_lookup_num_tokens=32)
ratios = {name: {} for name in names}
for seed, key, ids, out in cases:
    sequence = torch.cat([ids, out])
    hf_s, hf_forwards = replay.hf_prompt_lookup_s(sequence, ids.numel(), torch.tensor(eos))
    base = replay.forward_s(ids.numel()) + hf_s
    line = f"{seed} {key[:24]:24s} prompt {ids.numel():3d} new {out.numel():3d} "
    line += f"hf {base:5.2f}s/{hf_forwards:2d}"
    for name in names:
        variants.use(name)
        target = replay.Replay(sequence, pair.target.vocab_size, eos[0])
        started = replay.clock()
        o = generate(
            target,
            draft,
            ids[None],
            max_new_tokens=out.numel(),
            eos_token_id=eos,
            prompt_lookup_num_tokens=32,
        )
        seconds = replay.clock() - started
        assert o.sequences[0, ids.numel() :].tolist() == out.tolist(), key
        ratios[name][seed, key] = base / seconds
        line += f"  {name} {seconds:5.2f}s/{target.forwards - 1:2d} {base / seconds:.3f}x"
    print(line, flush=True)
for name in names:
    for group in ("lee", "HumanEval"):
        keys = [k for k in ratios[name] if k[1].startswith(group)]
        if not keys:
            continue
        mine = [ratios[name][k] for k in keys]
        against = [ratios[name][k] / ratios[names[0]][k] for k in keys]
        print(
            f"{name:10s} {group:9s} median {statistics.median(mine):.3f}x, "
            f"lowest {min(mine):.3f}x, "
            f">= 1.15x on {sum(r >= 1.15 for r in mine)}/{len(mine)}; / {names[0]}: median "
            f"{statistics.median(against):.3f}, {min(against):.3f}-{max(against):.3f}"
        )
