"""The static decoder's attention over bf16 caches in C (backends/kernels/attention.py): that it
computes what decoder.grouped_attention computes (to within the order of float32 sums), that
a query's result does not depend on the other rows and tokens of its call, that a query with
nothing to attend gets NaN as torch's softmax gives, where the decoder uses it and where it
does not (float32 caches, many queries, shapes it does not take), and that a bf16 static
target with it gives its own output when speculating."""

from __future__ import annotations

import pytest
import torch
from tiny_models import assert_speculative_equals_alone, bf16_llama_pair, random_prompts

from dynaspec.backends import decoder
from dynaspec.backends.kernels.attention import KERNEL as attention_kernel
from dynaspec.backends.static import make_fast

needs_kernel = pytest.mark.skipif(
    not attention_kernel.available(),
    reason=f"attention kernel: {attention_kernel.unavailable_reason()}",
)


def _problem(rows: int, heads: int, kv_heads: int, n: int, dim: int, attend: int, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    query = torch.randn(rows, heads, n, dim, generator=generator).to(torch.bfloat16)
    keys = torch.randn(rows, kv_heads, 96, dim, generator=generator).to(torch.bfloat16)
    values = torch.randn(rows, kv_heads, 96, dim, generator=generator).to(torch.bfloat16)
    mask = torch.rand(rows, n, attend, generator=generator) > 0.3
    mask[..., 0] = True  # every query attends to something
    return query, keys, values, mask


def _torch(query, keys, values, mask, scaling=0.125):
    rows, heads, n, dim = query.shape
    out = decoder.grouped_attention(query, keys, values, mask, scaling)
    return out.transpose(1, 2).reshape(rows, n, heads * dim)


@needs_kernel
@pytest.mark.parametrize(
    "rows,heads,kv_heads,n,dim,attend",
    [(1, 12, 2, 1, 128, 80), (1, 14, 2, 3, 64, 33), (3, 4, 4, 2, 32, 17), (2, 8, 1, 5, 16, 96)],
)
def test_kernel_computes_grouped_attention(rows, heads, kv_heads, n, dim, attend):
    query, keys, values, mask = _problem(rows, heads, kv_heads, n, dim, attend)
    out = attention_kernel.attend(query, keys, values, mask, 0.125)
    reference = _torch(query, keys, values, mask)
    assert out.shape == reference.shape and out.dtype == torch.bfloat16
    # Only float32 sums in another order: a few outputs one bf16 rounding apart, no more.
    torch.testing.assert_close(out.float(), reference.float(), rtol=2**-7, atol=2**-9)
    assert (out != reference).float().mean() < 0.02


@needs_kernel
def test_a_query_gets_the_same_bits_in_any_call():
    query, keys, values, mask = _problem(3, 12, 2, 4, 64, 50)
    together = attention_kernel.attend(query, keys, values, mask, 0.125)
    for row in range(3):
        for token in range(4):
            alone = attention_kernel.attend(
                query[row : row + 1, :, token : token + 1],
                keys[row : row + 1],
                values[row : row + 1],
                mask[row : row + 1, token : token + 1],
                0.125,
            )
            assert torch.equal(alone[0, 0], together[row, token])


@needs_kernel
def test_a_query_with_nothing_to_attend_gets_nan_as_torch_does():
    query, keys, values, mask = _problem(1, 4, 2, 2, 32, 20)
    mask[0, 1] = False
    out = attention_kernel.attend(query, keys, values, mask, 0.125)
    assert out[0, 1].isnan().all() and not out[0, 0].isnan().any()
    assert _torch(query, keys, values, mask)[0, 1].isnan().all()


def test_the_kernel_takes_only_bf16_caches_and_its_shapes():
    available = attention_kernel.available()
    assert attention_kernel.supports(torch.bfloat16, 12, 2, 128) == available
    assert not attention_kernel.supports(torch.float32, 12, 2, 128)
    assert not attention_kernel.supports(torch.bfloat16, 12, 2, 40)  # d not a multiple of 16
    assert not attention_kernel.supports(torch.bfloat16, 34, 2, 64)  # 17 heads a group
    assert not attention_kernel.supports(torch.bfloat16, 12, 5, 64)  # heads not in groups


@needs_kernel
def test_the_kernel_refuses_what_it_cannot_compute():
    query, keys, values, mask = _problem(1, 4, 2, 1, 32, 20)
    with pytest.raises(ValueError, match="float32"):
        attention_kernel.attend(query.float(), keys.float(), values.float(), mask, 0.125)
    with pytest.raises(ValueError, match="100 slots"):
        attention_kernel.attend(query, keys, values, torch.ones(1, 1, 100, dtype=bool), 0.125)


def _counting(monkeypatch) -> list[int]:
    calls: list[int] = []
    attend = attention_kernel.attend

    def counted(query, *rest):
        calls.append(query.shape[0] * query.shape[2])
        return attend(query, *rest)

    monkeypatch.setattr(attention_kernel, "attend", counted)
    return calls


@needs_kernel
def test_the_decoder_uses_it_for_a_few_bf16_queries_only(monkeypatch):
    calls = _counting(monkeypatch)
    target, _ = bf16_llama_pair()
    packed = make_fast(target, static=True)
    packed.decoder.row_invariant = False  # oneDNN's layers: the fastest attention per call
    prompt = torch.randint(0, 128, (1, 20))
    packed.begin(prompt, max_length=64)
    packed.forward(prompt[0], 20)  # 20 queries: grouped_attention
    assert calls == []
    packed.forward(torch.tensor([5, 6, 7]), 3)
    assert calls == [3] * len(packed.decoder.blocks)
    calls.clear()
    # bit-exact (bf16 layers on dynaspec's kernels): every query past the prompt's prefill
    exact = make_fast(target, static=True)
    assert exact.bit_exact
    exact.begin(prompt, max_length=64)
    exact.forward(torch.cat([prompt[0], torch.arange(9)]), 10)  # 19 prefill, grouped; 10
    exact.forward(torch.arange(9), 9)
    assert calls == [10] * len(exact.decoder.blocks) + [9] * len(exact.decoder.blocks)
    calls.clear()
    float32 = make_fast(bf16_llama_pair()[0].float(), static=True)
    float32.begin(prompt, max_length=64)
    float32.forward(torch.tensor([5]), 1)
    assert calls == []


@needs_kernel
def test_the_kernel_and_grouped_attention_give_close_logits(monkeypatch):
    target, _ = bf16_llama_pair()
    prompt = torch.randint(0, 128, (1, 12), generator=torch.Generator().manual_seed(3))
    logits = {}
    for queries in (decoder.KERNEL_QUERIES, 0):  # 0: grouped_attention everywhere
        monkeypatch.setattr(decoder, "KERNEL_QUERIES", queries)
        adapter = make_fast(target, static=True)
        adapter.decoder.row_invariant = bool(queries)  # bit-exact: the kernel past the prefill
        adapter.begin(prompt, max_length=64)
        adapter.forward(prompt[0], 12)
        logits[queries] = torch.stack([adapter.forward(torch.tensor([t]), 1)[0] for t in (9, 4)])
    kernel, grouped = logits.values()
    torch.testing.assert_close(kernel.float(), grouped.float(), rtol=0.02, atol=0.02)


@needs_kernel
def test_a_speculative_bf16_static_target_gives_its_own_output():
    target, draft = bf16_llama_pair()
    fast = make_fast(target, static=True)
    prompts = random_prompts(4, 128, min_len=2, max_len=10, seed=4)
    assert_speculative_equals_alone(fast, make_fast(draft, static=True), prompts)
