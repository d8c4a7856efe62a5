"""The fast path in batches (backends/static_batch.py): a static target and draft over a
batch of left-padded rows give every row transformers' batched greedy output (float32 tiny
models, every draft source), rows that join and leave a running batch get their output alone,
and what the batch adapter cannot run is refused with the way out."""

from __future__ import annotations

import pytest
import torch
from test_batch import NEW, PROMPTS, padded, reference
from test_continuous import alone, joined_and_left
from test_continuous import run as run_continuous
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.backends import FastConfig, StaticAdapter, make_fast
from dynaspec.backends.static_batch import StaticBatchAdapter, batch_adapter
from dynaspec.continuous import ContinuousBatch
from dynaspec.errors import UnsupportedOptionError

SOURCES = ("model", "lookup", "hybrid")


@pytest.fixture(scope="module", params=("llama", "qwen2"))
def models(request: pytest.FixtureRequest) -> tuple[object, object, object, object]:
    """(transformers target, transformers draft, static target, static draft)."""
    target = tiny_model(request.param)
    draft = noisy_copy(target, scale=0.05)
    return target, draft, make_fast(target, static=True), make_fast(draft, static=True)


def cheap_draft(target) -> torch.nn.Module:
    """A draft of an eighth of the target's weight bytes (random weights, the same
    vocabulary): the adaptive rule expects it to pay and drafts with it (a draft of the
    target's size, like the noisy copy, it rightly never starts)."""
    return tiny_model(target.config.model_type, hidden_size=8, num_heads=2, seed=1)


def generate(target, draft, source: str, schedule: str, **kwargs) -> torch.Tensor:
    ids, mask = padded(PROMPTS)
    settings = dict(max_new_tokens=NEW, pad_token_id=0, num_assistant_tokens_schedule=schedule)
    if source != "model":
        settings["prompt_lookup_num_tokens"] = 6
    settings.update(kwargs)
    model = None if source == "lookup" else draft
    return dynaspec.generate(target, model, ids, attention_mask=mask, **settings)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("schedule", ("adaptive", "constant"))
def test_static_rows_are_transformers_batched_greedy_output(models, schedule, source) -> None:
    target, _, fast_target, fast_draft = models
    if schedule == "adaptive":  # the rule never starts a draft as large as the target
        fast_draft = make_fast(cheap_draft(target), static=True)
    out = generate(fast_target, fast_draft, source, schedule, num_assistant_tokens=4)
    assert torch.equal(out.sequences, reference(target))
    drafted = sum(r.num_drafted for s in out.row_stats for r in s.rounds)
    assert drafted > 0  # the rows did speculate


def test_the_static_target_alone_and_a_transformers_draft_mix(models) -> None:
    target, draft, fast_target, _ = models
    alone_out = generate(fast_target, None, "model", "constant")
    mixed = generate(fast_target, draft, "model", "constant", num_assistant_tokens=3)
    assert torch.equal(alone_out.sequences, reference(target))
    assert torch.equal(mixed.sequences, reference(target))


def test_rows_ending_early_stop_alone(models) -> None:
    target, _, fast_target, fast_draft = models
    new = reference(target)[:, -NEW:].tolist()
    eos = next(t for t in new[0] if any(t not in row for row in new[1:]))
    out = generate(fast_target, fast_draft, "hybrid", "adaptive", eos_token_id=eos)
    assert torch.equal(out.sequences, reference(target, eos_token_id=eos))


@pytest.mark.parametrize("source", SOURCES)
def test_static_rows_join_and_leave_with_their_output_alone(models, source: str) -> None:
    target, draft, fast_target, fast_draft = models
    batch = joined_and_left(target, draft, fast_target, fast_draft, source)
    assert batch.target.cache == []


def test_static_prompts_prefilled_in_chunks_give_the_same_output(models) -> None:
    target, draft, fast_target, fast_draft = models
    batch = ContinuousBatch(fast_target, fast_draft, prompt_lookup_num_tokens=6)
    got = run_continuous(batch, {0: 0, 1: 1, 2: 1, 3: 2}, {}, chunk=3)
    for index, prompt in enumerate(PROMPTS):
        assert got[index] == alone(target, draft, prompt), index


def test_a_batch_adapter_per_kind_of_model(models) -> None:
    target, _, fast_target, _ = models
    assert isinstance(batch_adapter(fast_target), StaticBatchAdapter)
    assert not isinstance(batch_adapter(target), StaticBatchAdapter)


def test_the_cache_grows_for_long_rows_and_keeps_what_it_held(models) -> None:
    """A row that outgrows the cache's slots gets more, and the tokens cached stay valid:
    the output equals the rows' with a cache that never grew."""
    target, _, fast_target, fast_draft = models
    ids, mask = padded(PROMPTS)
    adapter = StaticBatchAdapter(fast_target)
    adapter.begin(ids, mask)
    first = adapter.capacity
    settings = dict(max_new_tokens=first + 8, min_new_tokens=first + 8, pad_token_id=0)
    short = [PROMPTS[0], PROMPTS[2]]
    ids, mask = padded(short)
    out = dynaspec.generate(fast_target, fast_draft, ids, attention_mask=mask, **settings)
    expected = target.generate(ids, attention_mask=mask, do_sample=False, **settings)
    assert torch.equal(out.sequences, expected)


def test_bytes_per_token_are_the_caches_keys_and_values(models) -> None:
    _, _, fast_target, _ = models
    adapter = StaticBatchAdapter(fast_target)
    ids, mask = padded(PROMPTS)
    adapter.begin(ids, mask)
    held = sum(t.numel() * t.element_size() for t in adapter.cache)
    assert held == adapter.bytes_per_token() * len(PROMPTS) * adapter.capacity


def test_a_compiled_model_is_refused_in_a_batch_with_the_way_out() -> None:
    target = tiny_model("llama")
    compiled = StaticAdapter(target, FastConfig(compile=True))
    ids, mask = padded(PROMPTS[:2])
    with pytest.raises(UnsupportedOptionError, match="without compile=True"):
        dynaspec.generate(compiled, None, ids, attention_mask=mask, max_new_tokens=2)


def ragged_forward(adapter: StaticBatchAdapter, sizes: list[int]) -> list[torch.Tensor]:
    """The rows' prompts, then one forward that feeds row r sizes[r] tokens (0 included);
    the logits of that forward's tokens, per row."""
    ids, mask = padded(PROMPTS)
    adapter.begin(ids, mask)
    adapter.forward(list(ids), [1] * len(ids))
    fed = [torch.arange(3, 3 + n) for n in sizes]
    return adapter.forward(fed, sizes)


def test_packed_rows_give_the_logits_of_the_padded_block(models) -> None:
    """The linear layers over the rows' tokens alone, packed, give each row the logits the
    (B, widest) block gives it (float32), and the next forward after a packed one too."""
    _, _, fast_target, _ = models
    sizes = [5, 0, 2, 1][: len(PROMPTS)]
    packed = StaticBatchAdapter(fast_target)
    padded_block = StaticBatchAdapter(fast_target)
    padded_block.packs_rows = False
    for got, expected in zip(
        ragged_forward(packed, sizes), ragged_forward(padded_block, sizes), strict=True
    ):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    after = [torch.tensor([7]) for _ in sizes]
    for got, expected in zip(
        packed.forward(after, [1] * len(sizes)),
        padded_block.forward(after, [1] * len(sizes)),
        strict=True,
    ):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_packed_linear_layers_see_only_the_rows_tokens(models) -> None:
    """A ragged forward runs the linear layers over the sum of the rows' tokens, not B x
    the widest row's (what makes a row's long copy cheap for the others)."""
    _, _, fast_target, _ = models
    sizes = [5, 0, 2, 1][: len(PROMPTS)]
    adapter = StaticBatchAdapter(fast_target)
    seen: list[int] = []
    layer = adapter.decoder.blocks[0].gate_proj
    hook = layer.register_forward_hook(lambda _m, args, _o: seen.append(args[0].numel()))
    try:
        ragged_forward(adapter, sizes)
    finally:
        hook.remove()
    hidden = adapter.decoder.embed_tokens.weight.shape[1]
    assert seen[-1] == sum(sizes) * hidden


def test_a_rows_long_forward_beside_short_ones_attends_row_by_row(models, monkeypatch) -> None:
    """One row fed many tokens (a catch-up) beside rows fed one or none: each row attends
    with its own tokens over its own slots (`ragged_attention`), and the logits are the
    padded block's; when the rows fill most of the block, the block attends as one."""
    from dynaspec.backends import decoder

    _, _, fast_target, _ = models
    calls: list[tuple[int, ...]] = []
    ragged = decoder.ragged_attention

    def counted(query, key_cache, value_cache, mask, packing, scaling):
        calls.append(packing.sizes)
        return ragged(query, key_cache, value_cache, mask, packing, scaling)

    monkeypatch.setattr(decoder, "ragged_attention", counted)
    sizes = [40, 1, 0, 1][: len(PROMPTS)]
    padded_block = StaticBatchAdapter(fast_target)
    padded_block.packs_rows = False
    expected = ragged_forward(padded_block, sizes)
    assert not calls
    got = ragged_forward(StaticBatchAdapter(fast_target), sizes)
    assert calls and calls[-1] == tuple(sizes)
    for row, expect in zip(got, expected, strict=True):
        torch.testing.assert_close(row, expect, rtol=1e-5, atol=1e-5)
    full = [4, 3, 4, 4][: len(PROMPTS)]
    ragged_forward(StaticBatchAdapter(fast_target), full)
    assert calls[-1] != tuple(full)  # nearly full: one attention over the block
