"""Long bf16 forwards on a CPU are fed a multiple of 4 rows (backends/gemm_rows.py), one
sequence's and a batch's: the padding is invisible, in the logits returned, the cache kept
and the output.

The tiny models are far shorter than MIN_PADDED_ROWS and float32, so the tests force the
padding on for every forward over more than one token (monkeypatched) and compare with the
same model unpadded: exactly, in float32, where the output is concerned.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import hf_greedy, noisy_copy, random_prompts, tiny_model

import dynaspec
from dynaspec.backends import gemm_rows
from dynaspec.backends.hf import HFAdapter
from dynaspec.backends.hf_batch import HFBatchAdapter
from dynaspec.continuous import ContinuousBatch

VOCAB = 64


@pytest.fixture
def always_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every float32 forward over 2+ tokens on the CPU padded to a multiple of 4 rows."""
    monkeypatch.setattr(gemm_rows, "MIN_PADDED_ROWS", 2)
    monkeypatch.setattr(gemm_rows, "PADDED_DTYPES", (torch.float32,))


def _plain_rows(
    num_tokens: int,
    dtype: torch.dtype | None,
    device: torch.device | str,
    room: int | None = None,
) -> int:
    return num_tokens


def test_only_long_bf16_forwards_on_a_cpu_are_padded() -> None:
    assert gemm_rows.fed_rows(365, torch.bfloat16, "cpu") == 368
    assert gemm_rows.fed_rows(364, torch.bfloat16, "cpu") == 364
    assert gemm_rows.fed_rows(1021, torch.bfloat16, torch.device("cpu")) == 1024
    assert gemm_rows.fed_rows(255, torch.bfloat16, "cpu") == 255  # short: as it is
    assert gemm_rows.fed_rows(365, torch.float32, "cpu") == 365  # MKL's float32: no pattern
    assert gemm_rows.fed_rows(365, None, "cpu") == 365
    assert gemm_rows.fed_rows(365, torch.bfloat16, "cuda") == 365
    assert gemm_rows.fed_rows(365, torch.bfloat16, "cpu", room=368) == 368
    assert gemm_rows.fed_rows(365, torch.bfloat16, "cpu", room=367) == 365  # would not fit
    assert gemm_rows.padded(torch.tensor([5, 6, 7]), 5).tolist() == [5, 6, 7, 7, 7]
    assert gemm_rows.padded(torch.tensor([5, 6, 7]), 3).tolist() == [5, 6, 7]


def test_a_padded_forward_returns_the_real_rows_and_caches_only_them(
    always_padded, monkeypatch
) -> None:
    model = tiny_model("llama", vocab_size=VOCAB, num_layers=2, hidden_size=32)
    prompt = torch.arange(3, 12)[None]  # 9 tokens: 12 rows fed
    outputs = []
    for padding in (True, False):
        if not padding:
            monkeypatch.setattr("dynaspec.backends.hf.fed_rows", _plain_rows)
        adapter = HFAdapter(model)
        assert adapter._rows(9) == (12 if padding else 9)
        tokens = adapter.begin(prompt)
        first = adapter.forward(tokens, 3)  # (3, V): the prompt's last 3 tokens
        assert adapter.num_cached == 9 and adapter.cache.get_seq_length() == 9
        after = adapter.forward(torch.tensor([20, 21, 22, 23, 24]), 5)  # 8 rows fed
        assert adapter.num_cached == 14 and adapter.cache.get_seq_length() == 14
        outputs.append(torch.cat([first, after]))
    torch.testing.assert_close(outputs[0], outputs[1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("schedule", ["constant", "adaptive"])
def test_padded_forwards_give_the_target_alone_output(always_padded, schedule):
    """Speculative (model draft and prompt lookup) and the target alone, padded, give
    transformers' greedy output token for token."""
    target = tiny_model("llama", vocab_size=VOCAB, num_layers=2, hidden_size=32)
    draft = noisy_copy(target, scale=0.02, seed=1)
    for prompt in random_prompts(3, VOCAB, seed=4):
        reference = hf_greedy(target, prompt, 20)
        for source in ({"draft": draft}, {"draft": None, "prompt_lookup_num_tokens": 6}):
            out = dynaspec.generate(
                target,
                source.pop("draft"),
                prompt,
                max_new_tokens=20,
                num_assistant_tokens=5,
                num_assistant_tokens_schedule=schedule,
                **source,
            )
            assert torch.equal(out.sequences, reference)
        alone = dynaspec.generate(target, None, prompt, max_new_tokens=20)
        assert torch.equal(alone.sequences, reference)


def test_no_padding_past_the_end_of_the_models_positions(always_padded) -> None:
    """GPT-2's learned positions end at n_positions: a forward whose padding would reach
    past them is fed as it is (else an index error), and the output is still transformers'."""
    model = tiny_model("gpt2", vocab_size=VOCAB, num_layers=2, hidden_size=32, max_length=16)
    prompt = torch.tensor([[3, 4, 5, 6] * 3 + [3, 4]])  # 14 tokens: 16 rows fit
    adapter = HFAdapter(model)
    assert adapter._rows(14) == 16
    adapter.forward(adapter.begin(prompt), 1)
    assert adapter._rows(2) == 2  # 4 rows would end at position 17
    logits = adapter.forward(torch.tensor([5, 6]), 2)
    assert adapter.num_cached == 16 and logits.shape == (2, VOCAB)
    reference = hf_greedy(model, prompt, 2)
    out = dynaspec.generate(
        model,
        None,
        prompt,
        max_new_tokens=2,
        prompt_lookup_num_tokens=4,
        num_assistant_tokens_schedule="constant",
    )
    assert torch.equal(out.sequences, reference)


def test_a_batch_block_is_widened_until_its_rows_are_a_multiple_of_4() -> None:
    assert gemm_rows.fed_width(3, 101, torch.bfloat16, "cpu") == 104  # 303 -> 312 rows
    assert gemm_rows.fed_width(2, 183, torch.bfloat16, "cpu") == 184  # 366 -> 368
    assert gemm_rows.fed_width(5, 73, torch.bfloat16, "cpu") == 76  # 365 -> 380
    assert gemm_rows.fed_width(4, 101, torch.bfloat16, "cpu") == 101  # 404: as it is
    assert gemm_rows.fed_width(3, 50, torch.bfloat16, "cpu") == 50  # 150 rows: short
    assert gemm_rows.fed_width(3, 101, torch.float32, "cpu") == 101


def _batch_logits(model, widen: bool, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """The logits of a 3-row batch's block forwards before and after a fourth row joins
    (its prefill padded too), with the padding on or off."""
    if not widen:
        monkeypatch.setattr("dynaspec.backends.hf_batch.fed_width", lambda b, w, d, v: w)
        monkeypatch.setattr("dynaspec.backends.hf_batch.fed_rows", _plain_rows)
    adapter = HFBatchAdapter(model)
    ids = torch.tensor([[0, 0, 5, 6, 7], [9, 3, 4, 8, 9], [0, 0, 0, 0, 11]])
    adapter.begin(ids, (ids != 0).long())
    first = adapter.forward(list(ids), [1, 2, 1])  # 15 rows: 24 fed when widened
    assert adapter.mask.shape[1] == (8 if widen else 5)
    after = adapter.forward(
        [torch.tensor([20, 21]), torch.tensor([22]), torch.tensor([23])], [2, 1, 1]
    )
    own = adapter.prefill(torch.tensor([4, 5, 6, 7, 8]))  # 5 tokens: 8 rows fed when padded
    assert own.get_seq_length() == 5
    adapter.join(torch.tensor([4, 5, 6, 7, 8, 9]), own)
    joined = adapter.forward(
        [torch.tensor([30]), torch.tensor([31]), torch.tensor([32]), torch.tensor([9])], [1] * 4
    )
    return first + after + joined


def test_a_batch_prefill_is_not_padded_past_the_models_positions(always_padded) -> None:
    model = tiny_model("gpt2", vocab_size=VOCAB, num_layers=2, hidden_size=32, max_length=16)
    adapter = HFBatchAdapter(model)
    own = adapter.prefill(torch.tensor([3, 4, 5, 6] * 3 + [3]))  # 13 tokens: 16 rows fed
    assert own.get_seq_length() == 13
    own = adapter.prefill(torch.tensor([4, 5]), own)  # 4 rows would end at position 17
    assert own.get_seq_length() == 15


def test_a_padded_batch_returns_the_real_rows_logits(always_padded, monkeypatch) -> None:
    model = tiny_model("llama", vocab_size=VOCAB, num_layers=2, hidden_size=32)
    padded_rows = _batch_logits(model, True, monkeypatch)
    plain_rows = _batch_logits(model, False, monkeypatch)
    for got, want in zip(padded_rows, plain_rows, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_padded_batches_give_transformers_batched_greedy_output(always_padded, name) -> None:
    """A batch (model draft, prompt lookup, both) and rows that join a running batch,
    padded, give transformers' greedy output token for token."""
    target = tiny_model(name, vocab_size=VOCAB, num_layers=2, hidden_size=32)
    draft = noisy_copy(target, scale=0.02, seed=1)
    prompts = [[5, 6, 7], [9, 3, 4, 8, 9, 3, 4, 8, 9, 3, 4, 8, 9], [11], [2, 30, 31, 2, 30]]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(row)) + row for row in prompts])
    mask = (
        torch.arange(width) >= width - torch.tensor([len(row) for row in prompts])[:, None]
    ).long()
    reference = target.generate(
        ids, attention_mask=mask, do_sample=False, max_new_tokens=16, pad_token_id=0
    )
    for model, lookup in ((draft, None), (None, 6), (draft, 6)):
        out = dynaspec.generate(
            target,
            model,
            ids,
            attention_mask=mask,
            max_new_tokens=16,
            pad_token_id=0,
            prompt_lookup_num_tokens=lookup,
        )
        assert torch.equal(out.sequences, reference)
    batch = ContinuousBatch(target, draft, prompt_lookup_num_tokens=6)
    rows = [batch.make_row(prompt, {"max_new_tokens": 16}) for prompt in prompts]
    for row, prompt in zip(rows, prompts, strict=True):
        batch.admit(batch.joining(row, prompt))
    while batch.rows:
        batch.step()
        batch.leave(lambda row: row.done)
    for index, row in enumerate(rows):
        alone = hf_greedy(target, torch.tensor([prompts[index]]), 16)[0, len(prompts[index]) :]
        assert row.committed[row.start :].tolist() == alone.tolist(), index
