"""Real pair, batches: every row of dynaspec's batched output against transformers' batched
greedy output of the same left-padded batch (the issue's "0 bugs" check), per method.

Run: python benchmarks/batch/real_pair_equality.py [--new 48] (the default pair, converted)
Prints one line per (method, row): equal, or where the outputs part and how far the target's
top two logits lie apart there (in the dtype's steps: a tie within 4).
"""

from __future__ import annotations

import argparse
import json
import platform

import torch

import dynaspec
from dynaspec.eval.data import load_prompts
from dynaspec.prompts import left_padded, render_prompt

METHODS = {
    "target": dict(with_draft=False),
    "adaptive": dict(),
    "hybrid": dict(prompt_lookup_num_tokens=32),
    "dynamic": dict(num_assistant_tokens_schedule="dynamic"),
}


def gap_steps(target, sequence: list[int]) -> float:
    """The target's top-two logit gap at the end of `sequence`, in steps of its dtype."""
    with torch.no_grad():
        logits = target(torch.tensor([sequence])).logits[0, -1].float()
    top = logits.topk(2).values
    eps = torch.finfo(next(target.parameters()).dtype).eps
    step = eps * 2 ** torch.floor(torch.log2(top[0].abs()))
    return float((top[0] - top[1]) / step)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new", type=int, default=48)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    pair = dynaspec.load_pair("qwen2.5-coder")
    tok = pair.tokenizer
    prompts = load_prompts("code,summarization,open-ended", 1, args.seed, max_prompt_chars=1200)
    rows = [render_prompt(tok, p.text, chat=True) for p in prompts]
    ids, mask = left_padded(rows, tok.pad_token_id)
    common = dict(max_new_tokens=args.new, pad_token_id=tok.pad_token_id)
    with torch.no_grad():
        reference = pair.target.generate(ids, attention_mask=mask, do_sample=False, **common)
    width = ids.shape[1]
    dtype = str(next(pair.target.parameters()).dtype)
    results = {"cpu": platform.processor() or "see lscpu", "dtype": dtype, "rows": []}
    for name, settings in METHODS.items():
        settings = dict(settings)
        draft = None if settings.pop("with_draft", True) is False else pair.draft
        out = dynaspec.generate(pair.target, draft, ids, attention_mask=mask, **common, **settings)
        for row in range(len(rows)):
            ours, theirs = out.sequences[row].tolist(), reference[row].tolist()
            n = min(len(ours), len(theirs))
            part = next((i for i in range(width, n) if ours[i] != theirs[i]), None)
            line = {"method": name, "row": row, "task": prompts[row].task, "equal": part is None}
            if part is not None:
                pads = int((mask[row] == 0).sum())
                gap = gap_steps(pair.target, theirs[pads:part])  # the row alone, unpadded
                line.update(parts_at_new_token=part - width, gap_steps=round(gap, 2), tie=gap <= 4)
            results["rows"].append(line)
            print(json.dumps(line))
    print(json.dumps({k: v for k, v in results.items() if k != "rows"}))


if __name__ == "__main__":
    main()
