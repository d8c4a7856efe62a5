"""Which earlier occurrence to copy from, measured offline on the target's own outputs.

At every position of the `target` records' outputs of the given bench runs, prompt
lookup's match (2-gram, as the hybrid runs it) is found over the prompt and the output so
far with each `LookupConfig.match`; its first copied token is right when the output goes on
with it. Printed per occurrence choice and agreement bucket (1, 2-3, 4-7, ...), also split
by whether the previous position's first copied token was right ("after-hit") or not
("after-miss"), and the target forwards that copying 10 tokens a round (transformers' prompt
lookup) would need over all the outputs.

Run: python occurrences.py RUN/results.jsonl [...]   (runs of `dynaspec bench --pair
     qwen2.5-coder --task grounded`; the model cache must hold the target's tokenizer)
"""

import collections
import json
import shlex
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from dynaspec.drafters.prompt_lookup import MATCHES, LookupConfig, find_match
from dynaspec.eval.data import load_prompts, render_prompt
from dynaspec.models import presets
from dynaspec.models.cache import preset_folder
from dynaspec.policies.lookup_acceptance import agreement_bucket


def first_tokens(tokens, start, match, eos, counts):
    """Adds each position's (bucket, right?) to counts[match, ...]."""
    config, previous_right = LookupConfig(32, 2, match), True
    for end in range(start, tokens.numel()):
        found = find_match(tokens[:end], config, eos)
        right = found is not None and bool(found.continuation[0] == tokens[end])
        if found is not None:
            bucket = agreement_bucket(found.agreement)
            after = "after-hit" if previous_right else "after-miss"
            for key in ((match, bucket), (match, after, bucket)):
                counts[key][0] += right
                counts[key][1] += 1
        previous_right = right


def forwards(tokens, start, match, eos):
    """Target forwards that copying 10 tokens a round needs to produce tokens[start:]."""
    config, end, count = LookupConfig(10, 2, match), start, 0
    while end < tokens.numel():
        found, run, count = find_match(tokens[:end], config, eos), 0, count + 1
        if found is not None:
            copy = found.continuation.tolist()
            while run < len(copy) and end + run < tokens.numel() and copy[run] == tokens[end + run]:
                run += 1
        end += run + 1
    return count


def main(paths):
    target = presets.pair_presets()["qwen2.5-coder"].target
    tokenizer = AutoTokenizer.from_pretrained(
        preset_folder(presets.model_presets()[target], torch.bfloat16)
    )
    eos = torch.tensor(
        sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")})
    )
    counts, total = collections.defaultdict(lambda: [0, 0]), collections.Counter()
    for path in map(Path, paths):
        command = shlex.split((path.parent / "command.txt").read_text())
        seed = int(command[command.index("--seed") + 1])
        prompts = {p.id: p for p in load_prompts("grounded", 4, seed)}
        records = [json.loads(line) for line in path.open()]
        outputs = {r["prompt_id"]: r["output_ids"] for r in records if r["method"] == "target"}
        for prompt_id, output in outputs.items():
            ids = render_prompt(tokenizer, prompts[prompt_id].text, chat=True)[0]
            tokens = torch.cat([ids, torch.tensor(output)])
            for match in MATCHES:
                first_tokens(tokens, ids.numel(), match, eos, counts)
                total[match] += forwards(tokens, ids.numel(), match, eos)
    print("match     after       agreement  first copied token right  positions")
    for key in sorted(counts, key=str):
        right, positions = counts[key]
        match, *after, bucket = key
        span = f"{2**bucket}-{2 ** (bucket + 1) - 1}"
        print(
            f"{match:9s} {(after or ['any'])[0]:10s} {span:>10s}  {right / positions:24.2f}  {positions:9d}"
        )
    print("transformers' prompt lookup (10), target forwards:", dict(total))


if __name__ == "__main__":
    main(sys.argv[1:])
