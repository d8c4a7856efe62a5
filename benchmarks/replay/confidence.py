"""Offline: does the target's confidence in the newest token say whether a short match's copy
will be kept? It is free (the last verification computed it), so the copy rule could price a
copy by it as well as by the agreement. On the recorded quote summaries, the bf16 target's
probabilities over prompt + recorded output (one forward each); at every output position with
a lookup match ("longest"): the first copied token kept or not, by agreement and by p(newest
token). Then the gain it could bring: a copy length per agreement bucket (and per confidence
level), fitted on these same prompts to the best summed log ratio against transformers'
prompt lookup (10) (in-sample: an upper bound), each prompt decoded with the table on
replay.py's line.

    python confidence.py [PROMPT_PREFIX]      (default lee: the quote summaries)
"""

import collections
import math
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import replay  # noqa: E402

from dynaspec import load_pair  # noqa: E402
from dynaspec.drafters.prompt_lookup import LookupConfig, find_match  # noqa: E402

LENGTHS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def agreement_bucket(agreement: int) -> int:
    return sum(agreement >= edge for edge in (2, 3, 4, 6, 8, 16))


def confidence_level(p: float, levels: int) -> int:
    edges = {1: (), 2: (0.5,), 3: (0.5, 0.95)}[levels]
    return sum(p >= edge for edge in edges)


pair = load_pair("qwen2.5-coder")
tok = pair.tokenizer
eos = torch.tensor(sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")}))
prompts = {}  # (seed, id): (prefill s, transformers' decode s, {output position: match})
for seed, key, ids, out in replay.recorded(
    tok, "grounded", sys.argv[1] if len(sys.argv) > 1 else "lee"
):
    seq, start = torch.cat([ids, out]), ids.numel()
    with torch.no_grad():
        probs = pair.target(seq[None]).logits[0].float().softmax(-1)
    p_token = probs[:-1].gather(1, seq[1:, None])[:, 0]  # p_token[i]: p(seq[i + 1])
    matches = {}
    for end in range(start, seq.numel()):
        match = find_match(seq[:end], LookupConfig(32, 2, "longest"), eos)
        if match is None:
            continue
        copy = match.continuation.tolist()
        count = 0
        while count < len(copy) and end + count < seq.numel() and copy[count] == seq[end + count]:
            count += 1
        matches[end - start] = (match.agreement, count, len(copy), p_token[end - 2].item())
    hf_s, _ = replay.hf_prompt_lookup_s(seq, start, eos)
    prompts[seed, key] = (replay.forward_s(start), hf_s, matches, out.numel())
    print(seed, key, len(matches), "positions with a match", flush=True)

table = collections.defaultdict(lambda: [0, 0])
for _, _, matches, _ in prompts.values():
    for agreement, count, _, p in matches.values():
        cell = table[min(agreement, 4), confidence_level(p, 3)]
        cell[0] += 1
        cell[1] += count > 0
print(
    "first copied token kept, by agreement (rows: 1, 2, 3, 4+) and p(newest token) "
    "(< 0.5, 0.5-0.95, >= 0.95): share (positions)"
)
for agreement in (1, 2, 3, 4):
    cells = [table[agreement, level] for level in range(3)]
    print(agreement, "  ".join(f"{kept / max(n, 1):.2f} ({n:4d})" for n, kept in cells))


def decode_s(matches, new, lengths, levels):
    end, seconds = 0, 0.0
    while end < new:
        copied = kept = 0
        if end in matches:
            agreement, count, available, p = matches[end]
            bucket = agreement_bucket(agreement), confidence_level(p, levels)
            copied = min(lengths[bucket], available, new - end - 1)
            kept = min(count, copied)
        seconds += replay.forward_s(1 + copied)
        end += kept + 1
    return seconds


def score(lengths, levels):
    return sum(
        math.log((prefill + hf) / (prefill + decode_s(matches, new, lengths, levels)))
        for prefill, hf, matches, new in prompts.values()
    )


for levels in (1, 2, 3):
    lengths = {(a, c): 10 for a in range(7) for c in range(levels)}
    best = score(lengths, levels)
    for _ in range(3):  # coordinate descent over the buckets' copy lengths
        for bucket in lengths:
            for length in LENGTHS:
                old, lengths[bucket] = lengths[bucket], length
                value = score(lengths, levels)
                if value > best:
                    best = value
                else:
                    lengths[bucket] = old
    ratios = [
        (prefill + hf) / (prefill + decode_s(matches, new, lengths, levels))
        for prefill, hf, matches, new in prompts.values()
    ]
    print(
        f"confidence levels {levels}: geometric mean {math.exp(best / len(prompts)):.3f}, median "
        f"{statistics.median(ratios):.3f}, lowest {min(ratios):.3f}, >= 1.15x on "
        f"{sum(r >= 1.15 for r in ratios)}/{len(ratios)}"
    )
