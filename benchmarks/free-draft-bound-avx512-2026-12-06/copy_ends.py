"""Offline, on the quote summaries' target outputs recorded by this folder's sibling runs
(`../*/*ge*/results.jsonl`, each prompt once): at every position where prompt lookup finds a
match (the longest agreement, n-grams 2 then 1, up to 32 tokens), how many copied tokens the
output keeps, and whether copies that reach a sentence end in their source are kept past it:

    python copy_ends.py
"""

import collections
import json
import statistics
from pathlib import Path

import torch
from transformers import AutoTokenizer

from dynaspec.drafters.prompt_lookup import LookupConfig, find_match
from dynaspec.eval import data
from dynaspec.paths import default_cache_dir

HERE = Path(__file__).resolve().parent
SENTENCE_END = (".", "!", "?")
folder = next((default_cache_dir() / "hf").glob("qwen2.5-coder-1.5b-*"))
tok = AutoTokenizer.from_pretrained(folder)
config = LookupConfig(prompt_lookup_num_tokens=32, max_matching_ngram_size=2, match="longest")
eos = torch.tensor([tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")])


def outputs():
    """(seed, prompt id, output ids) of every recorded quote summary, once each."""
    seen = set()
    for path in sorted(HERE.parent.glob("*/*ge*/results.jsonl")):
        for line in path.open():
            record = json.loads(line)
            if record["method"] != "target" or "quote" not in record["prompt_id"]:
                continue
            seed = int(record["run"]["command"].split("--seed ")[1].split()[0])
            if (seed, record["prompt_id"]) not in seen:
                seen.add((seed, record["prompt_id"]))
                yield seed, record["prompt_id"], record["output_ids"]


def sentence_end(token: torch.Tensor) -> bool:
    return tok.decode(token).rstrip().endswith(SENTENCE_END)


counts, kept_at_break = collections.Counter(), []
for seed, key, output in outputs():
    prompt = next(p for p in data.load_prompts("grounded", 4, seed) if p.id.startswith(key))
    ids = data.render_prompt(tok, prompt.text, chat=True)[0]
    out = torch.tensor(output)
    full = torch.cat([ids, out])
    counts["prompts"] += 1
    pos = 0
    while pos < out.numel():
        match = find_match(full[: ids.numel() + pos], config, eos)
        if match is None:
            pos += 1
            continue
        copy, truth = match.continuation, out[pos : pos + match.continuation.numel()]
        kept = 0
        while kept < truth.numel() and copy[kept] == truth[kept]:
            kept += 1
        counts["matches"] += 1
        counts["first copied token kept" if kept else "first copied token rejected"] += 1
        ends = [j for j in range(copy.numel()) if sentence_end(copy[j : j + 1])]
        if ends and kept >= ends[0] + 1:  # kept through the source's first sentence end
            counts["kept through a sentence end"] += 1
            went_on = kept > ends[0] + 1 or kept == truth.numel() == ends[0] + 1
            counts["... and past it" if went_on else "... and broke right after it"] += 1
        if kept:
            kept_at_break.append(kept)
        pos += kept + 1
for name, count in counts.items():
    print(f"{name}: {count}")
print(f"tokens kept where the first was: median {statistics.median(kept_at_break)}")
