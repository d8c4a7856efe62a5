"""Continuous batching (dynaspec/continuous.py): rows that join a running batch between
rounds and leave it when they end (or are cancelled) get, token for token, what
generate() gives their prompt alone, for each draft source and architecture; the cache
shrinks back when rows leave."""

from __future__ import annotations

import pytest
import torch
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.backends.hf_batch import HFBatchAdapter
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.config import SpecConfig
from dynaspec.errors import ConfigError, InputError

NEW = 16
# Different lengths, a one-token prompt, and one that repeats itself (prompt lookup copies).
PROMPTS = [[5, 6, 7], [9, 3, 4, 8, 9, 3, 4, 8, 9, 3, 4, 8, 9, 3], [11], [2, 30, 31, 32, 40, 2, 30]]


@pytest.fixture(scope="module", params=("llama", "qwen2", "gpt2"))
def pair(request: pytest.FixtureRequest) -> tuple[object, object]:
    target = tiny_model(request.param)
    return target, noisy_copy(target, scale=0.05)


def alone(target, draft, prompt: list[int], **kwargs) -> list[int]:
    ids = torch.tensor([prompt])
    out = dynaspec.generate(target, draft, ids, max_new_tokens=NEW, **kwargs)
    return out.sequences[0, len(prompt) :].tolist()


def run(
    batch: ContinuousBatch,
    arrivals: dict[int, int],
    kwargs: dict,
    chunk: int | None = None,
    prompts: list[list[int]] = PROMPTS,
    new: int = NEW,
) -> dict[int, list[int]]:
    """Prompt i (of `prompts`, `new` tokens each) joins before round arrivals[i]; rows leave
    as soon as they end. With `chunk`, a joining prompt is prefilled `chunk` tokens per round
    (one joining row at a time, all at once while no row generates), as serve/'s engine
    does."""
    out: dict[int, list[int]] = {}
    names: dict[int, int] = {}
    waiting: list = []
    step = 0
    while len(out) < len(arrivals):
        for index, when in arrivals.items():
            if when == step:
                row = batch.make_row(prompts[index], dict(kwargs, max_new_tokens=new))
                names[id(row)] = index
                waiting.append(batch.joining(row, prompts[index]))
        if chunk is None:
            while waiting:
                batch.admit(waiting.pop(0))
        elif waiting and batch.prefill(waiting[0], chunk if batch.rows else None):
            batch.admit(waiting.pop(0))
        batch.step()
        for row in batch.leave(lambda row: row.done):
            out[names[id(row)]] = row.committed[row.start :].tolist()
        step += 1
        assert step < (200 if chunk is None else 300), "the batch never ended"
    return out


def joined_and_left(target, draft, batched_target, batched_draft, source: str) -> ContinuousBatch:
    """A batch over `batched_target` (and `batched_draft` and/or prompt lookup, as `source`
    says) whose rows join at rounds 0, 0, 2 and 5 and leave when they end: each row's output
    equals generate() of its prompt alone with `target` and `draft`. Returns the batch."""
    model = None if source == "lookup" else batched_draft
    lookup = None if source == "model" else 6
    batch = ContinuousBatch(batched_target, model, prompt_lookup_num_tokens=lookup)
    got = run(batch, {0: 0, 1: 0, 2: 2, 3: 5}, {})
    for index, prompt in enumerate(PROMPTS):
        assert got[index] == alone(target, draft, prompt), index
    assert batch.rows == []
    return batch


@pytest.mark.parametrize("source", ["model", "lookup", "hybrid"])
def test_rows_that_join_and_leave_get_their_output_alone(pair, source: str) -> None:
    target, draft = pair
    batch = joined_and_left(target, draft, target, draft, source)
    assert batch.target.mask.shape == (0, 0) and batch.target.cache is None


@pytest.mark.parametrize("schedule", ["constant", "heuristic", "dynamic"])
def test_fixed_schedules_per_row(pair, schedule: str) -> None:
    target, draft = pair
    batch = ContinuousBatch(target, draft, SpecConfig(num_assistant_tokens_schedule=schedule))
    got = run(batch, {0: 0, 1: 1, 2: 1, 3: 3}, {})
    for index, prompt in enumerate(PROMPTS):
        assert got[index] == alone(target, draft, prompt), index


def test_seeded_sampling_repeats_alone(pair) -> None:
    """A sampled row with a seed draws as generate(seed=...) alone does (fixed schedule:
    the adaptive rule's rounds follow measured times)."""
    target, draft = pair
    spec = SpecConfig(num_assistant_tokens_schedule="constant", num_assistant_tokens=3)
    settings = {"do_sample": True, "temperature": 0.9, "top_p": 0.95, "seed": 7}
    batch = ContinuousBatch(target, draft, spec)
    got = run(batch, {0: 0, 1: 2, 2: 2, 3: 4}, settings)
    for index, prompt in enumerate(PROMPTS):
        expected = alone(
            target,
            draft,
            prompt,
            num_assistant_tokens_schedule="constant",
            num_assistant_tokens=3,
            **settings,
        )
        assert got[index] == expected, index


def test_a_cancelled_row_leaves_and_the_cache_shrinks(pair) -> None:
    target, draft = pair
    batch = ContinuousBatch(target, draft)
    rows = []
    for prompt in PROMPTS:
        rows.append(batch.make_row(prompt, {"max_new_tokens": NEW}))
        batch.join(rows[-1], prompt)
    for _ in range(3):
        batch.step()
    width = batch.target.mask.shape[1]
    left = batch.leave(lambda row: row is rows[1])  # the longest prompt: its client went away
    assert left == [rows[1]] and len(batch.rows) == 3
    assert batch.target.mask.shape == (3, max(batch.target.num_cached))
    assert batch.target.mask.shape[1] < width
    for layer in batch.target.cache.layers:
        assert layer.keys.shape[0] == 3 and layer.keys.shape[2] == batch.target.mask.shape[1]
    while batch.rows:
        batch.step()
        batch.leave(lambda row: row.done)
    for index in (0, 2, 3):
        assert rows[index].committed[rows[index].start :].tolist() == alone(
            target, draft, PROMPTS[index]
        )


def test_bad_requests_are_typed_errors(pair) -> None:
    target, draft = pair
    batch = ContinuousBatch(target, draft)
    with pytest.raises(InputError, match="no tokens"):
        batch.make_row([], {})
    with pytest.raises(InputError):
        batch.make_row([10**6], {})
    with pytest.raises(ConfigError):
        batch.make_row([5], {"max_new_tokens": 0})
    with pytest.raises(ConfigError, match="unknown keyword"):
        batch.make_row([5], {"max_tokens": 3})


@pytest.mark.parametrize("source", ["model", "hybrid"])
def test_prompts_prefilled_in_chunks_between_rounds_give_the_same_output(pair, source) -> None:
    target, draft = pair
    lookup = None if source == "model" else 6
    batch = ContinuousBatch(target, draft, prompt_lookup_num_tokens=lookup)
    got = run(batch, {0: 0, 1: 1, 2: 1, 3: 2}, {}, chunk=3)
    for index, prompt in enumerate(PROMPTS):
        assert got[index] == alone(target, draft, prompt), index


def test_a_joining_prompt_is_prefilled_a_chunk_per_round(pair) -> None:
    target, draft = pair
    batch = ContinuousBatch(target, draft)
    first = batch.make_row(PROMPTS[0], {"max_new_tokens": NEW})
    batch.join(first, PROMPTS[0])
    long = PROMPTS[1]  # 14 tokens: 13 to prefill
    joining = batch.joining(batch.make_row(long, {"max_new_tokens": NEW}), long)
    made = []
    while not batch.prefill(joining, 4):
        made.append(joining.done)
        batch.step()  # the first row goes on between the chunks
    assert made == [4, 8, 12] and joining.left == 0
    assert first.committed.numel() - first.start >= 3
    record = batch.admit(joining)
    # its first token at once, by a forward of its last prompt token alone
    assert record is not None and record.num_drafted == 0 and record.num_emitted == 1
    assert len(batch.rows) == 2 and batch.target.num_cached[1] == len(long)
    assert joining.row.length == len(long) + 1


def test_a_joining_row_waits_for_no_draft_prefill(pair) -> None:
    """The target caches a joining prompt; the draft model reads none of it until the rule
    starts the row (a lagging row's catch-up), and the row's output is still its own."""
    target, draft = pair
    spec = SpecConfig(num_assistant_tokens_schedule="constant", num_assistant_tokens=3)
    batch = ContinuousBatch(target, draft, spec)  # a rule that always drafts
    rows = []
    for prompt in PROMPTS[:2]:
        rows.append(batch.make_row(prompt, {"max_new_tokens": NEW}))
        batch.join(rows[-1], prompt)
    assert batch.target.num_cached == [len(PROMPTS[0]), len(PROMPTS[1])]  # + a first token
    assert batch.drafter.model.num_cached == [0, 0]
    while batch.rows:
        batch.step()
        batch.leave(lambda row: row.done)
    assert all(row.stats.summary().num_drafted for row in rows)  # the draft did start
    for row, prompt in zip(rows, PROMPTS[:2], strict=True):
        assert row.committed[row.start :].tolist() == alone(target, draft, prompt)


def test_a_joining_prompts_prefill_prices_the_drafts_catch_up(pair) -> None:
    """The adaptive rule learns the target's time per prompt token from a joining row's
    prefill (timed outside any round): what a lagging draft's catch-up of that prompt is
    priced at. Without it the catch-up is priced at one draft forward a token and a long
    prompt's draft never starts."""
    target, draft = pair
    batch = ContinuousBatch(target, draft)
    costs = batch.policy.shared.costs
    short = list(range(3, 3 + 10))  # under min_prefill_tokens: too short to tell
    batch.join(batch.make_row(short, {"max_new_tokens": NEW}), short)
    assert not costs.prefill_costs
    prompt = list(range(3, 3 + 40))
    joining = batch.joining(batch.make_row(prompt, {"max_new_tokens": NEW}), prompt)
    while not batch.prefill(joining, 16):
        pass
    batch.admit(joining)
    assert len(costs.prefill_costs) == 1 and costs.prefill_costs[0] > 0
    assert joining.seconds > 0 and joining.done == len(prompt) - 1


def test_rows_join_a_cache_rolled_back_to_nothing(pair) -> None:
    """A cache whose every row was rolled back to no tokens still holds those rows (layers
    of zero columns): rows that join afterwards are added to it, and a forward over all of
    them gives each row what it gives alone. (Found in CI: a draft whose only row had
    rolled back to nothing took two joining rows, and its next forward failed.)"""
    target, _ = pair
    adapter = HFBatchAdapter(target)
    adapter.begin(torch.tensor([PROMPTS[0]]), torch.ones(1, len(PROMPTS[0]), dtype=torch.long))
    adapter.forward([torch.tensor(PROMPTS[0])], [1])
    adapter.crop([0])
    for prompt in (PROMPTS[2], PROMPTS[3]):
        adapter.join(torch.tensor(prompt[-1:]))
    assert adapter.num_cached == [0, 0, 0]
    for layer in adapter.cache.layers:
        assert layer.keys.shape[0] == 3
    prompts = [PROMPTS[0], PROMPTS[2], PROMPTS[3]]
    logits = adapter.forward([torch.tensor(prompt) for prompt in prompts], [1, 1, 1])
    for row, prompt in enumerate(prompts):
        alone_logits = target(torch.tensor([prompt])).logits[0, -1]
        torch.testing.assert_close(logits[row][0], alone_logits, rtol=1e-4, atol=1e-5)
