"""Long bf16 forwards on a CPU are fed a multiple of 4 rows (backends/gemm_rows.py): the
padding is invisible, in the logits returned, the cache kept and the output.

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

VOCAB = 64


@pytest.fixture
def always_padded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every float32 forward over 2+ tokens on the CPU padded to a multiple of 4 rows."""
    monkeypatch.setattr(gemm_rows, "MIN_PADDED_ROWS", 2)
    monkeypatch.setattr(gemm_rows, "PADDED_DTYPES", (torch.float32,))


def _plain_rows(num_tokens: int, dtype: torch.dtype | None, device: torch.device | str) -> int:
    return num_tokens


def test_only_long_bf16_forwards_on_a_cpu_are_padded() -> None:
    assert gemm_rows.fed_rows(365, torch.bfloat16, "cpu") == 368
    assert gemm_rows.fed_rows(364, torch.bfloat16, "cpu") == 364
    assert gemm_rows.fed_rows(1021, torch.bfloat16, torch.device("cpu")) == 1024
    assert gemm_rows.fed_rows(255, torch.bfloat16, "cpu") == 255  # short: as it is
    assert gemm_rows.fed_rows(365, torch.float32, "cpu") == 365  # MKL's float32: no pattern
    assert gemm_rows.fed_rows(365, None, "cpu") == 365
    assert gemm_rows.fed_rows(365, torch.bfloat16, "cuda") == 365
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
