"""The most any lookahead rule could gain on one batch: an oracle's lower bound on the time of
a batched speculative call, against the batched target alone, on the fast path.

Issue 21 asks the hybrid (draft model + prompt lookup 32) at batch 4 on grounded prompts to
run >= 2.0x the batched target alone. A batch's call lasts until its slowest row has all its
tokens, so no rule can finish it sooner than

    (the batch's prefill) + max over rows of (the least time that row's tokens can take),

and this script bounds the second term from below with an oracle that knows, at every
position of a row's output (the target's own greedy output), how many of the next tokens a
copy could supply (the longest run of them found anywhere in the prompt and the output so
far, up to 32: any copy source, not only the lookup's match) and how many the draft model
would propose correctly (its teacher-forced greedy tokens, up to 20), and pays for them at
less than they cost in a batch:

- a round verifying n tokens of the row costs T(n + o), the target's forward over n + o
  tokens of *one* row (measured on the single static adapter, its lower envelope: T(n) =
  min over m >= n), o the other rows that cannot have ended yet (a row ends no sooner than
  its fewest rounds with every draft free and right), each with one token (a packed batch
  forward over N tokens costs at least one row's over N: the same products, more caches);
- k tokens of the draft model cost k one-token draft forwards, and a row's first model token
  costs the draft's prefill of that row's prompt first (its catch-up), once;
- copies are free, every drafted token is accepted (the oracle drafts exactly the right run),
  and the plan may copy m tokens and let the model carry on with k more.

Per row the least time is a shortest path over positions (dynamic programming); the bound on
the speedup is the target alone's measured call over (the measured prefill call of the batch +
the slowest row's least time). Nothing else running:

    python benchmarks/batch-bound-avx512-2026-12-04/bound.py --seed 1
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from dynaspec.core.settings import pad_token_id
from dynaspec.eval import data
from dynaspec.eval.bench.fast import FastModels
from dynaspec.eval.oracle.measure import trace_draft
from dynaspec.eval.prompts_file import left_padded
from dynaspec.generation import generate
from dynaspec.models.loading import eos_token_ids, load_models

COPY_CAP = 32  # the hybrid's prompt lookup (--prompt-lookup 32)
MODEL_CAP = 20  # the draft model's most tokens a round (num_assistant_tokens)
LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 33, 40, 53)  # forwards timed, tokens


def median_time(function, repeats: int = 5) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def forward_times(adapter, context: torch.Tensor, lengths) -> dict[int, float]:  # noqa: ANN001
    """Median seconds of a forward over n new tokens after `context` (1, L) is cached."""
    adapter.begin(context, max_length=context.shape[1] + 128)
    adapter.forward(context[0], 1)
    out = {}
    for n in lengths:
        tokens = context[0, -n:].clone()

        def once(tokens=tokens) -> None:  # noqa: ANN001
            adapter.crop(context.shape[1])
            adapter.forward(tokens, tokens.numel())

        once()
        out[n] = median_time(once)
    adapter.crop(0)
    return out


def envelope(times: dict[int, float], most: int) -> list[float]:
    """T(n) for n = 0..most: linear between the timed lengths, then the lower envelope
    min over m >= n (a forward over fewer tokens costs at most what one over more does)."""
    known = sorted(times)
    values = np.interp(range(most + 1), known, [times[n] for n in known])
    return list(np.minimum.accumulate(values[::-1])[::-1])


def copy_runs(context: list[int], new: list[int]) -> list[int]:
    """At each position i of `new`: the longest run new[i:i+k] (k <= COPY_CAP) found anywhere
    in context + new[:i] (the tokens committed by then)."""
    runs = []
    for i in range(len(new)):
        seen = np.array(context + new[:i])
        best = 0
        for k in range(1, min(COPY_CAP, len(new) - i) + 1):
            window = new[i : i + k]
            starts = np.arange(len(seen) - k + 1)
            if not starts.size:
                break
            hit = np.ones(starts.size, dtype=bool)
            for t, token in enumerate(window):
                hit &= seen[starts + t] == token
            if not hit.any():
                break
            best = k
        runs.append(best)
    return runs


def model_runs(draft_tokens: list[int], new: list[int]) -> list[int]:
    """At each position i: how many of new[i:] the draft's teacher-forced greedy tokens give
    in a row (capped at MODEL_CAP)."""
    runs = [0] * (len(new) + 1)
    for i in range(len(new) - 1, -1, -1):
        runs[i] = runs[i + 1] + 1 if draft_tokens[i] == new[i] else 0
    return [min(r, MODEL_CAP) for r in runs[:-1]]


def fewest_rounds(copies: list[int], models: list[int]) -> int:
    """The fewest rounds a row needs after its first token, drafting for free: each round
    reaches as far as a copy followed by the model's run allows, plus the target's token."""
    n, i, rounds = len(copies), 1, 0
    while i < n:
        reach = max(m + (models[i + m] if i + m < n else 0) for m in range(copies[i] + 1))
        i += reach + 1
        rounds += 1
    return rounds


def fewest_model_tokens(copies: list[int], models: list[int], i: int, length: int) -> int | None:
    """The fewest model tokens among `length` drafted tokens at position i (a copy of m, then
    length - m of the model's), None when no split supplies them all."""
    n = len(copies)
    for m in range(min(copies[i], length), max(length - MODEL_CAP, 0) - 1, -1):
        k = length - m
        if k == 0 or (i + m < n and k <= models[i + m]):
            return k
    return None


def least_time(copies, models, step, draft_step, catchup, others) -> float:  # noqa: ANN001
    """The oracle's least time for a row to emit every token after its first (which the
    prefill gives), without the model or with it (its catch-up paid once): round t's
    forward also carries one token of each of the `others[t]` other rows still going."""
    n = len(copies)
    most = COPY_CAP + MODEL_CAP
    splits = [
        [fewest_model_tokens(copies, models, i, d) for d in range(most + 1)] for i in range(n)
    ]

    def solve(with_model: bool) -> float:
        rounds = n + 1
        inf = float("inf")
        f = [[inf] * (rounds + 1) for _ in range(n + most + 2)]
        for i in range(n, n + most + 2):
            f[i] = [0.0] * (rounds + 1)
        for i in range(n - 1, 0, -1):
            for t in range(rounds - 1, -1, -1):
                extra = others[t] if t < len(others) else 0
                best = inf
                for d in range(most + 1):
                    k = splits[i][d]
                    if k is None or (k and not with_model):
                        continue
                    cost = k * draft_step + step[min(d + 1 + extra, len(step) - 1)]
                    best = min(best, cost + f[i + d + 1][t + 1])
                f[i][t] = best
        return f[1][0] + (catchup if with_model else 0.0)

    return min(solve(False), solve(True))


def measure_row(static_draft, prompt, new, eos, step):  # noqa: ANN001, ANN201
    """(the row's record, (copy runs, model runs, the draft's catch-up s)) of one row whose
    new tokens are `new` (cut after its first EOS)."""
    ends = [i for i, token in enumerate(new) if token in eos]
    new = new[: ends[0] + 1] if ends else new
    full = torch.cat([prompt[0], torch.tensor(new)])
    trace = trace_draft(static_draft, prompt, full, prompt.shape[1])
    static_draft.begin(prompt, max_length=prompt.shape[1] + 8)
    catchup = median_time(
        lambda: (static_draft.crop(0), static_draft.forward(prompt[0], 1)), repeats=3
    )
    static_draft.crop(0)
    copies = copy_runs(prompt[0].tolist(), new)
    models = model_runs(list(trace.tokens), new)
    row = {
        "prompt_tokens": prompt.shape[1],
        "new_tokens": len(new),
        "copy_covered": sum(1 for c in copies if c),
        "mean_model_run": float(np.mean(models)),
        "draft_catchup_s": round(catchup, 3),
        "fewest_rounds": fewest_rounds(copies, models),
        "target_alone_steps_s": round(sum(step[1] for _ in new[1:]), 3),
    }
    return row, (copies, models, catchup)


def add_least_times(rows: list[dict], runs: list[tuple], step, draft_step: float) -> None:  # noqa: ANN001
    """Each row's least decode time, alone and with the other rows that cannot have ended."""
    for index, (copies, models, catchup) in enumerate(runs):
        # round t carries a token of every other row that cannot have ended before it
        fewest = [row["fewest_rounds"] for other, row in enumerate(rows) if other != index]
        others = [sum(r > t for r in fewest) for t in range(len(copies) + 1)]
        by_itself = least_time(copies, models, step, draft_step, catchup, [0] * len(others))
        rows[index]["least_decode_alone_s"] = round(by_itself, 3)
        least = least_time(copies, models, step, draft_step, catchup, others)
        rows[index]["least_decode_s"] = round(least, 3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--task", default="grounded")
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", default="benchmarks/batch-bound-avx512-2026-12-04")
    args = parser.parse_args()
    torch.set_num_threads(2)
    target, draft, tokenizer = load_models("qwen2.5-coder")
    eos = list(eos_token_ids(target, tokenizer))
    pad = pad_token_id(target, tokenizer=tokenizer, eos_token_ids=tuple(eos)) or 0
    chat = data.should_use_chat(tokenizer)
    prompts = [
        data.render_prompt(tokenizer, p.text, chat=chat)
        for p in data.load_prompts(args.task, args.n, args.seed, max_prompt_chars=2000)
    ]
    longest = max(p.shape[1] for p in prompts)
    fast = FastModels(target, draft, compile=False, max_length=longest + args.max_new_tokens)
    static_target, static_draft = fast.pair("static-hybrid")
    ids, mask = left_padded(prompts, pad)

    def call(max_new: int) -> torch.Tensor:
        with torch.inference_mode():
            out = generate(
                static_target,
                None,
                ids,
                attention_mask=mask,
                max_new_tokens=max_new,
                eos_token_id=eos,
                pad_token_id=pad,
                do_sample=False,
            )
        return out.sequences[:, ids.shape[1] :]

    call(2)  # warm-up
    outputs = call(args.max_new_tokens)
    alone = median_time(lambda: call(args.max_new_tokens), repeats=3)  # the target alone
    prefill = median_time(lambda: call(1), repeats=3)
    rows, runs = [], []
    with torch.inference_mode():
        context = torch.cat(prompts, dim=1)[:, :448]  # ~ the cache a row sees
        step = envelope(forward_times(static_target, context, LENGTHS), COPY_CAP + MODEL_CAP + 1)
        draft_step = forward_times(static_draft, context, (1,))[1]
        for prompt, out in zip(prompts, outputs, strict=True):
            row, run = measure_row(static_draft, prompt, out.tolist(), eos, step)
            rows.append(row)
            runs.append(run)
    add_least_times(rows, runs, step, draft_step)
    bound = prefill + max(row["least_decode_s"] for row in rows)
    result = {
        "seed": args.seed,
        "task": args.task,
        "rows": rows,
        "target_alone_call_s": round(alone, 3),
        "prefill_call_s": round(prefill, 3),
        "T_n_s": {n: round(step[n], 4) for n in (1, 2, 4, 8, 16, 33, 53)},
        "draft_step_s": round(draft_step, 4),
        "bound_call_s": round(bound, 3),
        "speedup_bound": round(alone / bound, 3),
    }
    print(json.dumps(result, indent=1))
    with open(f"{args.out}/bound-seed{args.seed}.json", "w", encoding="utf-8") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
