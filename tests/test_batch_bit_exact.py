"""Bit-exact batches on the fast path (issue 66, item 4): in bf16 a row of a static batch
attends as it would alone (backends/static_batch.py: its prompt's prefill by the same aligned
blocks, every other query on the attention kernel), so a row's greedy output equals the same
target alone's token for token whatever the other rows and their number, in a fixed batch of
1 to 4 rows and in a continuous batch whose rows join (whole or in chunked prefills) and leave
mid-way, as the server runs them. On the tie-prone bf16 model of tests/test_bit_exact.py;
with the batch's old attention (grouped_attention for more than 4 queries, its prefill in one
piece) rows part from their output alone at a tie."""

from __future__ import annotations

import pytest
import torch
from test_batch import padded
from test_bit_exact import HIDDEN, _alone, _model, _tie_pair, _tie_prompts, needs_kernels
from test_continuous import run
from tiny_models import random_prompts

import dynaspec
from dynaspec.backends.decoder import Prefill
from dynaspec.backends.static import make_fast
from dynaspec.backends.static_batch import StaticBatchAdapter
from dynaspec.continuous import ContinuousBatch

NEW = 24  # as test_bit_exact's `_alone`
SOURCES = ("draft", "lookup", "hybrid")


def _prompts() -> list[list[int]]:
    """The six tie prompts (8-24 tokens), then one of 150 tokens (prefilled in chunks)."""
    long = torch.cat([*random_prompts(5, 256, min_len=30, max_len=30, seed=7)], 1)
    return [p[0].tolist() for p in _tie_prompts()] + [long[0].tolist()]


def _alone_new(prompt: list[int]) -> list[int]:
    return _alone(tuple(prompt))[0, len(prompt) :].tolist()


def _options(source: str) -> tuple[object, dict]:
    _, draft = _tie_pair()
    options = {"num_assistant_tokens": 8}
    if source != "draft":
        options["prompt_lookup_num_tokens"] = 16
    return (None if source == "lookup" else draft), options


def test_a_prefill_attends_by_blocks_aligned_to_slot_zero() -> None:
    """(first, last, slots): whole or from slot 64 on (a chunk), the blocks are the same."""
    assert Prefill(150).blocks() == [(0, 64, 64), (64, 128, 128), (128, 150, 192)]
    assert Prefill(86, start=64).blocks() == [(0, 64, 128), (64, 86, 192)]
    assert Prefill(10, start=60).blocks() == [(0, 4, 64), (4, 10, 128)]  # a chunk off a block
    assert Prefill(0, start=9).blocks() == []


@needs_kernels
def test_a_static_bf16_batch_adapter_is_bit_exact() -> None:
    target, draft = _tie_pair()
    batch = StaticBatchAdapter(target)
    assert batch.bit_exact and batch.prefill_block == 64
    assert not StaticBatchAdapter(draft).bit_exact or draft.bit_exact


def _steps(fast, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """The logits of the target alone: its prompt's last token, then each token a step."""
    fast.begin(torch.tensor([prompt]), max_length=len(prompt) + len(tokens) + 8)
    first = fast.forward(torch.tensor(prompt), 1)
    return torch.cat([first, *(fast.forward(torch.tensor([t]), 1) for t in tokens)])


@needs_kernels
@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_a_rows_logits_in_a_static_batch_are_its_steps_alone_bitwise(arch, rows) -> None:
    """Each row's logits equal its target-alone steps' bit for bit: the first forward (each
    row's prompt, 5 to 90 tokens, with 0 to 32 more), ragged ones after it (1 to 33 tokens a
    row, a row fed nothing), and a row that joins (its prompt prefilled apart, in chunks of
    64) beside them. With the batch's old attention this fails from the first forward."""
    fast = make_fast(_model(arch, HIDDEN), static=True)
    generator = torch.Generator().manual_seed(rows)
    lengths = [90, 5, 17, 40, 70][: rows + 1]
    prompts = [torch.randint(0, 256, (n,), generator=generator).tolist() for n in lengths]
    tokens = [torch.randint(0, 256, (80,), generator=generator).tolist() for _ in lengths]
    alone = [_steps(fast, p, t) for p, t in zip(prompts, tokens, strict=True)]
    batch = StaticBatchAdapter(fast)
    ids, mask = padded(prompts[:rows])
    batch.begin(ids, mask)
    done = [-1] * (rows + 1)  # per row: its tokens fed so far (-1: none, its prompt neither)
    plans = [[32, 0, 7, 1], [1, 33, 0, 5], [3, 1, 16, 2, 9], [20, 4, 33, 12, 6], [9, 17, 2, 25, 33]]
    plans = [plan[:rows] if step < 2 else plan[: rows + 1] for step, plan in enumerate(plans)]
    for step, counts in enumerate(plans):
        if step == 2:  # a row joins: its prompt (but the last token) cached apart, in chunks
            head = torch.tensor(prompts[rows][:-1])
            own = batch.prefill(head[:64])
            batch.join(torch.tensor(prompts[rows]), batch.prefill(head[64:], own))
        feeds, wanted, firsts = [], [], []
        for row, count in enumerate(counts):
            start = max(done[row], 0)
            new = tokens[row][start : start + count]
            if done[row] < 0:  # its prompt first: whole (a fixed batch's) or its last token
                new = (ids[row].tolist() if step == 0 else prompts[row][-1:]) + new  # padded
            feeds.append(torch.tensor(new, dtype=torch.long))
            wanted.append(count + (done[row] < 0))
            firsts.append(0 if done[row] < 0 else start + 1)
            done[row] = start + count
        logits = batch.forward(feeds, wanted)
        for row, first in enumerate(firsts):
            expected = alone[row][first : first + wanted[row]]
            assert torch.equal(logits[row], expected), (step, row)


@needs_kernels
@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_each_row_of_a_fixed_batch_is_its_output_alone(source, rows) -> None:
    target, _ = _tie_pair()
    model, options = _options(source)
    prompts = _prompts()[rows - 1 : 2 * rows - 1]  # other rows beside each, 1 to 4 of them
    ids, mask = padded(prompts)
    out = dynaspec.generate(
        target, model, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0, **options
    )
    for row, prompt in enumerate(prompts):
        assert out.sequences[row, ids.shape[1] :].tolist() == _alone_new(prompt), row


def _continuous(source: str, arrivals: dict[int, int], chunk: int | None) -> dict[int, list]:
    """Prompt i joins before round arrivals[i] (a joining prompt prefilled `chunk` tokens a
    round while others generate, as serve/'s engine does; None: whole, one prompt a round);
    rows leave when they end."""
    target, _ = _tie_pair()
    model, options = _options(source)
    lookup = options.get("prompt_lookup_num_tokens")
    batch = ContinuousBatch(target, model, prompt_lookup_num_tokens=lookup)
    prompts = _prompts()
    whole = max(len(prompt) for prompt in prompts)
    return run(batch, arrivals, {}, chunk or whole, prompts, NEW)


@needs_kernels
@pytest.mark.parametrize("source", SOURCES)
def test_rows_joining_and_leaving_a_running_batch_get_their_output_alone(source) -> None:
    got = _continuous(source, {0: 0, 1: 1, 2: 1, 3: 4, 4: 6, 5: 9, 6: 12}, chunk=None)
    for index, prompt in enumerate(_prompts()):
        assert got[index] == _alone_new(prompt), index


@needs_kernels
def test_a_prompt_prefilled_in_chunks_beside_other_rows_gets_its_output_alone() -> None:
    """The 150-token prompt joins while rows generate, 100 tokens a round asked: rounded
    down to one block of 64, its chunks end on the blocks its prefill alone attends by."""
    got = _continuous("hybrid", {0: 0, 6: 1, 1: 2}, chunk=100)
    prompts = _prompts()
    for index in (0, 1, 6):
        assert got[index] == _alone_new(prompts[index]), index
