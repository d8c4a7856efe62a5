"""How soon the four first tokens of a burst can come, on this machine: the prefills of the
load test's prompts, timed as the server runs them, alone and all four in one forward.

The load test's four clients send their first requests at once; a first token needs its
whole prompt in the target's cache, and on a CPU a prefill is bound by multiply-adds, so
the last first token of the burst comes after the four prompts' prefills, however they are
scheduled. This prints each prompt's prefill (median of 3) and the four in one batched
forward (rows packed), and the lowest time-to-first-token p95 any schedule could reach,
against twice the single client's. Nothing else running:

    python benchmarks/serve-floor-avx512-2026-12-04/floor.py w8a8   # or none (bf16)
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from dynaspec.backends.static import make_fast
from dynaspec.backends.static_batch import StaticBatchAdapter
from dynaspec.eval.prompts_file import left_padded
from dynaspec.models.loading import load_model
from dynaspec.serve.prompts import Prompter
from dynaspec.serve.protocol import Message

RECORD = Path("benchmarks/serve-draft-w4a8-avx512-2026-12-04/loadtest-w8a8-w4a8.json")


def prompts_of(record: dict) -> tuple[list[str], list[str]]:
    """(the single client's prompts, the four clients' first prompts: the burst)."""
    single = [r["prompt"] for r in record["requests"][0]]
    burst = [r["prompt"] for r in record["requests"][1] if r["index"] == 0]
    return single, burst


def timed(function, repeats: int = 3) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    quantize = sys.argv[1] if len(sys.argv) > 1 else "w8a8"
    torch.set_num_threads(2)
    model, tokenizer = load_model("qwen2.5-coder-1.5b")[:2]
    fast = make_fast(
        model, static=True, quantize=None if quantize == "none" else quantize, release=True
    )
    batch = StaticBatchAdapter(fast)
    prompter = Prompter(tokenizer)
    record = json.loads(RECORD.read_text())
    single, burst = prompts_of(record)
    ids = {
        text: torch.tensor(prompter.chat([Message(role="user", content=text)]))
        for text in single + burst
    }
    with torch.inference_mode():
        batch.prefill(ids[burst[0]][:-1])  # warm-up, untimed
        alone = {text: timed(lambda t=ids[text]: batch.prefill(t[:-1])) for text in ids}
        padded, mask = left_padded([ids[text][None] for text in burst], 0)

        def together() -> None:
            batch.begin(padded, mask)
            batch.forward(list(padded), [1] * len(burst))  # left padding is not fed

        both = timed(together)
    for role, texts in (("single", single), ("burst", burst)):
        for text in texts:
            print(
                f"{role:6s} {ids[text].numel():4d} tokens  prefill {alone[text]:.2f} s  "
                f"{text[:40]!r}"
            )
    # The load test's p95 is nearest-rank: of 2 requests (one client) and of 8 (four), the
    # slowest first token. One client: at least its slower prompt's prefill. Four: the
    # burst's last first token, at least the four prefills one after another or all four
    # in one forward, whichever is sooner.
    single_floor = max(alone[text] for text in single)
    in_turn = sum(alone[text] for text in burst)
    floor = min(in_turn, both)
    print(
        f"the burst's last first token: {in_turn:.2f} s one prompt after another, "
        f"{both:.2f} s all {len(burst)} in one forward"
    )
    print(
        f"TTFT p95 floor: one client {single_floor:.2f} s, four clients {floor:.2f} s "
        f"({floor / single_floor:.2f}x; the goal: under 2x)"
    )


if __name__ == "__main__":
    main()
