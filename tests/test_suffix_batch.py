"""The suffix cache in batches: the rows of a batch share one index (each row's text added
when the call ends), rows of a running batch read their own scope and add their text when
they leave; every row's output is still the target's own."""

from __future__ import annotations

import pytest
import torch
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.round import CopySource

NEW = 16
PROMPTS = [[5, 6, 7], [9, 3, 4, 8, 9, 3, 4, 8], [11], [2, 30, 31, 32, 40, 2, 30]]


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


@pytest.fixture(scope="module")
def pair():
    target = tiny_model("llama")
    return target, noisy_copy(target, scale=0.05)


def suffix_copied(rounds) -> int:
    return sum(r.num_copied for r in rounds if r.plan.source is CopySource.SUFFIX)


@pytest.mark.parametrize("source", ["suffix", "suffix+model", "all"])
@pytest.mark.parametrize("schedule", ["adaptive", "dynamic"])
def test_batch_rows_share_one_index(pair, source: str, schedule: str) -> None:
    target, draft = pair
    ids, mask = padded(PROMPTS)
    reference = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW,
                                pad_token_id=0)  # fmt: skip
    cache = dynaspec.SuffixCache(size_mb=1)
    settings = dict(
        max_new_tokens=NEW,
        pad_token_id=0,
        num_assistant_tokens_schedule=schedule,
        suffix_cache=cache,
        prompt_lookup_num_tokens=6 if source == "all" else None,
    )
    model = None if source == "suffix" else draft
    first = dynaspec.generate(target, model, ids, attention_mask=mask, **settings)
    assert torch.equal(first.sequences, reference)
    assert cache.scopes() == ["default"]
    second = dynaspec.generate(target, model, ids, attention_mask=mask, **settings)
    assert torch.equal(second.sequences, reference)
    for row in second.row_stats:  # each row copies its own earlier text from the shared index
        assert suffix_copied(row.rounds) > 0


def test_running_rows_read_their_own_scope(pair) -> None:
    target, draft = pair
    cache = dynaspec.SuffixCache(size_mb=1)
    batch = ContinuousBatch(target, draft, suffix_cache=cache)

    def serve(prompt: list[int], scope: str) -> tuple[list[int], int]:
        row = batch.make_row(prompt, {"max_new_tokens": NEW})
        batch.admit(batch.joining(row, prompt, scope=scope))
        rounds = []
        while batch.rows:
            rounds += [r for r in batch.step() if r is not None]
            batch.leave(lambda row: row.done)
        return row.committed[row.start :].tolist(), suffix_copied(rounds)

    expected = [
        dynaspec.generate(target, None, torch.tensor([p]), max_new_tokens=NEW)
        .sequences[0, len(p) :]
        .tolist()
        for p in PROMPTS[:2]
    ]
    assert serve(PROMPTS[1], "alice") == (expected[1], 0)
    assert cache.scopes() == ["alice"]
    assert serve(PROMPTS[1], "bob") == (expected[1], 0)  # alice's text is not bob's
    text, copied = serve(PROMPTS[1], "alice")
    assert text == expected[1] and copied > 0
