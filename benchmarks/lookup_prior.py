"""What prompt lookup's copied tokens score, measured offline from a bench run's outputs.

At every position of the target's own output (the `target` records of RUN/results.jsonl),
prompt lookup's match (max_matching_ngram_size 2, 32 tokens, as the hybrid runs it) is
found over the prompt and the output so far; its first copied token is accepted when the
output goes on with it. Printed per task and agreement bucket (1, 2-3, 4-7, ...): the share
accepted and the number of positions with a match. The prior of `LookupPrior` (policies/
lookup_acceptance.py) was read from benchmarks/qwen2.5-coder-lookup-n3-2026-11-30.

Run: python benchmarks/lookup_prior.py RUN [RUN ...]   (folders with command.txt and
     results.jsonl of `dynaspec bench --pair qwen2.5-coder`; the model cache must hold the
     target's tokenizer)
"""

from __future__ import annotations

import collections
import json
import shlex
import sys
from pathlib import Path

import torch
from transformers import AutoTokenizer

from dynaspec.drafters.prompt_lookup import LookupConfig, find_match
from dynaspec.eval import data
from dynaspec.models import presets
from dynaspec.models.cache import preset_folder
from dynaspec.policies.lookup_acceptance import agreement_bucket


def option(command: list[str], name: str, default: str | None = None) -> str | None:
    return command[command.index(name) + 1] if name in command else default


def scores(run: Path, tokenizer, eos: torch.Tensor, counts: dict) -> None:
    """Adds run's (task, bucket) -> [first token accepted, positions] to `counts`."""
    command = shlex.split((run / "command.txt").read_text().strip())
    records = [json.loads(line) for line in (run / "results.jsonl").open()]
    outputs = {(r["task"], r["prompt_id"]): r for r in records if r["method"] == "target"}
    limit = option(command, "--max-prompt-chars")
    config = LookupConfig(32, 2)
    for task in option(command, "--task").split(","):
        prompts = data.load_prompts(
            task,
            int(option(command, "--n")),
            int(option(command, "--seed", "0")),
            max_prompt_chars=int(limit) if limit else None,
        )
        for prompt in prompts:
            record = outputs.get((task, prompt.id))
            if record is None:
                continue
            ids = data.render_prompt(tokenizer, prompt.text, chat=True)[0]
            if ids.numel() != record["prompt_tokens"]:
                raise SystemExit(f"{run}: {prompt.id} renders to other tokens than the run's")
            tokens = torch.cat([ids, torch.tensor(record["output_ids"])])
            for end in range(ids.numel(), tokens.numel()):
                match = find_match(tokens[:end], config, eos)
                if match is None:
                    continue
                cell = counts[(task, agreement_bucket(match.agreement))]
                cell[0] += int(match.continuation[0] == tokens[end])
                cell[1] += 1


def main(runs: list[str]) -> None:
    target = presets.pair_presets()["qwen2.5-coder"].target
    folder = preset_folder(presets.model_presets()[target], torch.bfloat16)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ends = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    eos = torch.tensor(sorted(ends))
    counts: dict = collections.defaultdict(lambda: [0, 0])
    for run in runs:
        scores(Path(run), tokenizer, eos, counts)
    print("task          agreement  first copied token accepted  positions")
    for (task, bucket), (accepted, total) in sorted(counts.items()):
        span = f"{2**bucket}-{2 ** (bucket + 1) - 1}"
        print(f"{task:13s} {span:>9s}  {accepted / total:27.2f}  {total:9d}")


if __name__ == "__main__":
    main(sys.argv[1:])
