"""How fast any hybrid of this lookup and this draft could be on a prompt, verifying on the
transformers target's forward: an oracle bound, against transformers' prompt lookup's time.

For each grounded prompt of RUN where `hybrid-w4a8` ran under LOOK_BELOW times transformers'
prompt lookup (a `dynaspec bench` folder with `target`, `hybrid-w4a8` and
`hf-prompt-lookup` records), along the target's own output:
- a(i): the tokens prompt lookup's match at position i (max_matching_ngram_size 2, 32
  tokens, the hybrid's settings) would have accepted: its continuation's common prefix
  with the output;
- d(j): the run of positions from j where the 4-bit draft (w4a8, as `hybrid-w4a8`) drafts
  the output's token (its greedy token, teacher-forced: along an agreeing run that is its
  autoregressive draft);
- V(n): the target's forward over n tokens after this prompt (transformers' cache, median
  of 3), its prefill P, and c, the draft's forward over one token, all timed here.
The oracle knows all of this in advance and never drafts a rejected token: from position i
it copies x <= a(i) tokens, lets the model draft k <= d(i + x) more (x + k <= 32), and the
target verifies x + k + 1, emitting them all; cost V(x + k + 1) + k c, the draft's catch-ups
free. T(i) = min over (x, k) of that cost + T(i + x + k + 1), T(128) = 0, and the oracle's
time is P + T(0). Any real hybrid with this lookup, this draft and this target is slower;
so transformers' measured time over the oracle's bounds its ratio from above.

Run: python benchmarks/guess-avx512-2026-12-05/bound.py RUN [RUN ...]   (after the bench,
     with nothing else running: it times forwards)
"""

from __future__ import annotations

import json
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from dynaspec import load_pair
from dynaspec.backends.hf import HFAdapter
from dynaspec.drafters.prompt_lookup import LookupConfig, find_match
from dynaspec.eval import data

CAP = 32  # the hybrid's lookup cap and the most tokens the oracle drafts in a round
LOOK_BELOW = 1.3  # prompts where the hybrid ran under this ratio to transformers' lookup


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def timed(call, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def costs(target: HFAdapter, draft, prompt: torch.Tensor) -> tuple[float, list[float], float]:
    """(P, V(n) for n = 0 .. CAP + 1 in seconds, c in seconds) after this prompt."""
    with torch.inference_mode():
        prefill = timed(lambda: (target.begin(prompt), target.forward(prompt[0], 1)), 1)
        length = target.num_cached
        probe = prompt[0, -CAP - 1 :]

        def verify(n: int) -> None:
            target.forward(probe[:n], n)
            target.crop(length)

        verify_times = [0.0] + [timed(lambda n=n: verify(n)) for n in range(1, CAP + 2)]
        draft.begin(prompt)
        draft.forward(prompt[0], 1)
        start = draft.num_cached

        def step() -> None:
            draft.forward(probe[:1], 1)
            draft.crop(start)

        step()
        return prefill, verify_times, timed(step, 7)


def runs(values: list[bool]) -> list[int]:
    """Per position, how many values from it on are True in a row."""
    out = [0] * (len(values) + 1)
    for index in range(len(values) - 1, -1, -1):
        out[index] = out[index + 1] + 1 if values[index] else 0
    return out


def oracle_time(copies: list[int], drafts: list[int], verify: list[float], c: float) -> float:
    """T(0) of the docstring's recursion."""
    total = len(copies)
    best = [0.0] * (total + 1)
    for i in range(total - 1, -1, -1):
        options = []
        for x in range(min(copies[i], CAP, total - 1 - i) + 1):
            k_most = min(drafts[i + x] if i + x < total else 0, CAP - x, total - 1 - i - x)
            for k in range(k_most + 1):
                options.append(verify[x + k + 1] + k * c + best[i + x + k + 1])
        best[i] = min(options)
    return best[0]


def main(folders: list[str]) -> None:
    pair = load_pair("qwen2.5-coder", draft_quantize="w4a8")
    tokenizer = pair.tokenizer
    target = HFAdapter(pair.target)
    eos = torch.tensor(
        sorted({tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")})
    )
    print(
        "prompt | tokens | P s | V(1) s | V(11) s | V(33) s | c ms | HF s | hybrid s | "
        "copies-only oracle s | oracle s | HF / oracle | HF / hybrid"
    )
    for folder in map(Path, folders):
        command = shlex.split((folder / "command.txt").read_text().strip())
        records = [json.loads(line) for line in (folder / "results.jsonl").open()]
        by = {(r["prompt_id"], r["method"]): r for r in records}
        prompts = data.load_prompts(
            "grounded", int(option(command, "--n")), int(option(command, "--seed"))
        )
        for prompt in prompts:
            reference = by.get((prompt.id, "target"))
            hybrid = by.get((prompt.id, "hybrid-w4a8"), {}).get("wall_time_s", float("nan"))
            hf = by[(prompt.id, "hf-prompt-lookup")]["wall_time_s"]
            if reference is None or not hf / hybrid < LOOK_BELOW:
                continue
            ids = data.render_prompt(tokenizer, prompt.text, chat=True)
            output = torch.tensor(reference["output_ids"])
            tokens = torch.cat([ids[0], output])
            copies = []
            for end in range(ids.shape[1], tokens.numel()):
                match = find_match(tokens[:end], LookupConfig(CAP, 2), eos)
                run = 0
                if match is not None:
                    ahead = tokens[end : end + match.continuation.numel()]
                    same = (match.continuation[: ahead.numel()] == ahead).int().cumprod(0)
                    run = int(same.sum())
                copies.append(run)
            with torch.inference_mode():
                pair.draft.begin(tokens[None, :-1])
                logits = pair.draft.forward(tokens[:-1], tokens.numel() - ids.shape[1])
            agree = (logits.argmax(-1) == output).tolist()
            prefill, verify, c = costs(target, pair.draft, ids)
            only = oracle_time(copies, [0] * (len(copies) + 1), verify, c)
            oracle = oracle_time(copies, runs(agree), verify, c)
            print(
                f"{prompt.id} | {ids.shape[1]} | {prefill:.2f} | {verify[1]:.3f} | "
                f"{verify[11]:.3f} | {verify[33]:.3f} | {c * 1000:.1f} | {hf:.2f} | "
                f"{hybrid:.2f} | {prefill + only:.2f} | {prefill + oracle:.2f} | "
                f"{hf / (prefill + oracle):.2f} | {hf / hybrid:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
