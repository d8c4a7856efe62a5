"""The cross-family bench (eval/cross_bench.py) on a byte-tokenizer target and a BPE draft:
every method decodes, the greedy outputs equal the target alone's, transformers' UAG runs as
the peer, and the summary reads the rows it was given."""

from __future__ import annotations

import torch
from test_cross_tokenizer import bpe_tokenizer, bytes_tokenizer, llama, prompt_ids

from dynaspec.eval import cross_bench


def test_every_method_runs_and_keeps_the_targets_output() -> None:
    target, draft = llama("bytes", 0, True), llama("bpe", 1, True)
    pair = cross_bench.Pair(target, draft, (bytes_tokenizer(), bpe_tokenizer()))
    items = [
        ("code/1", prompt_ids(bytes_tokenizer(), "def add(a, b):")),
        ("open-ended/2", prompt_ids(bytes_tokenizer(), "Once upon a time")),
    ]
    args = cross_bench.parse(["--out", "unused", "--max-new-tokens", "12", "--no-progress"])
    rows = cross_bench.run_all(pair, items, args)
    assert len(rows) == 2 * len(cross_bench.METHODS[:-1])  # eager-target needs --static
    summary = cross_bench.summarize(rows)
    assert set(summary) == set(cross_bench.METHODS[:-1])
    assert all(s["equal"] == 2 for s in summary.values()), summary
    assert summary["target"]["x_target"] == 1.0
    assert summary["hf-uag"]["x_hf_uag"] == 1.0
    assert "| intersection-dynamic |" in cross_bench.table(summary)
    cross_bench.classify(pair, rows, items)
    assert not any("divergence" in r for r in rows)  # equal outputs: nothing to classify

    # An output changed at its fourth token: classified there, and not a tie (float32).
    wrong = next(r for r in rows if r["method"] == "string-adaptive")
    wrong["tokens"] = [*wrong["tokens"][:3], (wrong["tokens"][3] + 1) % 256, *wrong["tokens"][4:]]
    cross_bench.classify(pair, rows, items)
    assert wrong["divergence"]["position"] == 3
    assert wrong["divergence"]["kind"] == "BUG"
    summary = cross_bench.summarize(rows)
    assert "1/2 (0 tie, 1 BUG)" in cross_bench.table(summary)


def test_the_summary_reads_its_rows() -> None:
    def row(prompt: str, method: str, seconds: float, drafted: int = 0, **extra) -> dict:
        return {
            "prompt": prompt,
            "method": method,
            "tokens": [1] * 10,
            "seconds": seconds,
            "drafted": drafted,
            "accepted": drafted // 2,
            "draft_time_s": 0.5,
            **extra,
        }

    rows = [
        row("code/1", "target", 10.0),
        row("code/1", "string-adaptive", 5.0, 4),
        row("open-ended/1", "target", 10.0),
        row("open-ended/1", "string-adaptive", 20.0, 4),
    ]
    summary = cross_bench.summarize(rows)["string-adaptive"]
    assert summary["per_task_x_target"] == {"code": 2.0, "open-ended": 0.5}
    assert summary["x_target"] == 1.25 and summary["acceptance"] == 0.5
    assert summary["draft_steps_per_token"] == torch.tensor(0.125).item()  # 0.5/4 s over 1 s
