"""CUDA graphs for batches (backends/batch_graphs.py): the static batch adapter over a model
made with graphs holds its rows in buckets at fixed addresses and runs every forward as a
block of bucketed rows x bucketed tokens. On the CPU the seam is an identity, so the
bucketing is tested there for exact logits (float32, prepacked: a row's product is bitwise
the same whatever the rows beside it) and for the output of fixed and continuous batches;
the capture itself by the tests marked cuda."""

from __future__ import annotations

import pytest
import torch
from test_batch import NEW, PROMPTS, padded, reference
from test_continuous import joined_and_left
from tiny_models import CUDA, noisy_copy, tiny_model

import dynaspec
from dynaspec.backends.batch_graphs import BatchGraphs
from dynaspec.backends.static import FastConfig, StaticAdapter, make_fast
from dynaspec.backends.static_batch import StaticBatchAdapter
from dynaspec.batch import batch_policy
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.config import SpecConfig
from dynaspec.policies.batch_adaptive import BatchAdaptivePolicy

VOCAB = 64


def model(arch: str = "llama", device: str = "cpu") -> torch.nn.Module:
    return tiny_model(arch, vocab_size=VOCAB, num_layers=2, hidden_size=32).to(device)


def pair(arch: str, device: str = "cpu") -> tuple[StaticBatchAdapter, StaticBatchAdapter]:
    """(plain, graphed) batch adapters over the same weights. The plain one runs the padded
    block too (`packs_rows` off): packed rows attend each alone over its own slots, which
    sums in another order (within float32 rounding of the block's)."""
    target = model(arch, device)
    plain = StaticBatchAdapter(StaticAdapter(target, FastConfig(prepack=True)))
    plain.packs_rows = False
    graphed = StaticAdapter(target, FastConfig(prepack=True, cuda_graphs=True))
    return plain, StaticBatchAdapter(graphed)


def test_rows_are_held_in_buckets_and_never_fewer() -> None:
    graphs = BatchGraphs(StaticAdapter(model(), FastConfig(cuda_graphs=True)))
    assert [graphs.rows_to_hold(rows, 0) for rows in (1, 2, 3, 5, 9, 17, 32, 33)] == [
        1, 2, 4, 8, 16, 32, 32, 33,
    ]  # fmt: skip
    assert graphs.rows_to_hold(3, 16) == 16  # rows that left keep their room
    assert not graphs.enabled  # the CPU: bucketed, never captured


def test_rows_move_in_place_when_others_leave() -> None:
    graphs = BatchGraphs(StaticAdapter(model(), FastConfig(cuda_graphs=True)))
    cache = [torch.arange(4.0).view(4, 1, 1, 1).repeat(1, 2, 3, 1) for _ in range(2)]
    address = cache[0].data_ptr()
    graphs.keep_rows(cache, [3, 1])
    assert cache[0].data_ptr() == address
    assert cache[0][:2, 0, 0, 0].tolist() == [3.0, 1.0]


def test_only_graphs_made_with_graphs_bucket_their_batches() -> None:
    target = model()
    assert StaticBatchAdapter(make_fast(target, static=True))._graphs is None
    assert StaticBatchAdapter(make_fast(target, graphs=True))._graphs is not None


def test_the_next_batch_takes_the_graphs_and_cache_of_the_last() -> None:
    """The graphs (and the cache they read) are the static adapter's, lent to one batch
    adapter at a time: the next batch starts on them; one made beside a live one gets its
    own."""
    fast = make_fast(model(), graphs=True)
    ids, mask = padded(PROMPTS[:3])
    first = StaticBatchAdapter(fast)
    first.begin(ids, mask)
    graphs, address = first._graphs, first.cache[0].data_ptr()
    beside = StaticBatchAdapter(fast)
    assert beside._graphs is not graphs and beside.cache == []
    del first, beside
    second = StaticBatchAdapter(fast)
    assert second._graphs is graphs and second.cache[0].data_ptr() == address
    second.begin(ids[:2], mask[:2])  # fewer rows and slots: the same cache
    assert second.cache[0].data_ptr() == address and second.num_cached == [0, 0]
    out = dynaspec.generate(fast, None, ids, attention_mask=mask, max_new_tokens=4)
    assert out.sequences.shape == (3, ids.shape[1] + 4)  # `second` still holds the graphs


def test_the_batch_rule_prices_bucketed_blocks() -> None:
    """With graphs a batch forward costs its block of buckets (the widest row's tokens,
    padded), not its rows' tokens: the rule is told so, as the single rule is."""
    target = model()
    for graphs, packed, buckets in ((True, False, (1, 2, 4, 8, 16, 32)), (False, True, ())):
        fast = make_fast(target, static=True, graphs=graphs)
        batch = ContinuousBatch(
            fast, make_fast(noisy_copy(target, scale=0.05), static=True, graphs=graphs)
        )
        assert batch.target.packs_rows is packed and batch.target.verify_buckets == buckets
        assert isinstance(batch.policy, BatchAdaptivePolicy)
        assert batch.policy.packed is packed and batch.policy.shared.costs.buckets == buckets
        assert batch_policy(SpecConfig(), 3, buckets=buckets).shared.costs.buckets == buckets


def _feed(adapters: tuple[StaticBatchAdapter, ...], tokens: list[torch.Tensor], logits: list[int]):
    outs = [adapter.forward(tokens, logits) for adapter in adapters]
    for row, (ours, theirs) in enumerate(zip(outs[1], outs[0], strict=True)):
        assert torch.equal(ours, theirs), f"row {row}"
    return outs[0]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_bucketed_rows_give_the_unbucketed_logits(arch: str) -> None:
    """Left-padded rows, ragged forwards (rows fed nothing among them), crops, a row that
    joins into a spare row and rows that leave: the same logits, bit for bit, and the
    cache's tensors keep their address while the rows fit their bucket."""
    adapters = pair(arch)
    plain, graphed = adapters
    generator = torch.Generator().manual_seed(0)
    ids, mask = padded(PROMPTS[:3])
    for adapter in adapters:
        adapter.begin(ids, mask)
    _feed(adapters, list(ids), [1, 1, 1])  # the prompts: a block of 4 rows x 16 tokens
    assert graphed.cache[0].shape[0] == 4  # 3 rows in a bucket of 4
    address = graphed.cache[0].data_ptr()
    for widths in ([1, 1, 1], [3, 0, 5], [9, 2, 1], [0, 0, 4]):
        tokens = [torch.randint(0, VOCAB, (n,), generator=generator) for n in widths]
        _feed(adapters, tokens, widths)
        keep = [length - n // 2 for length, n in zip(plain.num_cached, widths, strict=True)]
        for adapter in adapters:
            adapter.crop(keep)
    prompt = torch.randint(0, VOCAB, (7,), generator=generator)
    for adapter in adapters:
        adapter.join(prompt)  # the fourth row: the spare one
    assert graphed.cache[0].data_ptr() == address and plain.num_cached == graphed.num_cached
    _feed(
        adapters, [torch.tensor([5]), torch.tensor([6, 7]), torch.tensor([8]), prompt[-1:]], [1] * 4
    )
    for adapter in adapters:
        adapter.leave([3, 0])
    assert graphed.cache[0].data_ptr() == address  # moved in place
    for widths in ([2, 1], [1, 16], [40, 1], [1, 1]):  # 40: past the buckets, uncaptured
        tokens = [torch.randint(0, VOCAB, (n,), generator=generator) for n in widths]
        _feed(adapters, tokens, widths)
    assert graphed._starts() == plain._starts()
    for ours, theirs in zip(graphed.cache, plain.cache, strict=True):
        for row, slots in enumerate(plain._starts()):  # a row's tokens (no left padding)
            assert torch.equal(ours[row, :, :slots], theirs[row, :, :slots])


def test_fixed_batches_with_graph_buckets_give_the_batched_greedy_output() -> None:
    target = tiny_model("qwen2")
    draft = noisy_copy(target, scale=0.05)
    fast_target, fast_draft = make_fast(target, graphs=True), make_fast(draft, graphs=True)
    ids, mask = padded(PROMPTS)
    for drafting, schedule in ((None, "constant"), (fast_draft, "constant"), (None, "adaptive")):
        out = dynaspec.generate(
            fast_target, drafting, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0,
            num_assistant_tokens_schedule=schedule, num_assistant_tokens=4,
        )  # fmt: skip
        assert torch.equal(out.sequences, reference(target))


@pytest.mark.parametrize("source", ["model", "hybrid"])
def test_continuous_rows_with_graph_buckets_get_their_output_alone(source: str) -> None:
    target = tiny_model("llama")
    draft = noisy_copy(target, scale=0.05)
    fast_target, fast_draft = make_fast(target, graphs=True), make_fast(draft, graphs=True)
    batch = joined_and_left(target, draft, fast_target, fast_draft, source)
    assert batch.target.cache != []  # kept for the next rows: the graphs read it


# ---- on a GPU: the capture itself -------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@CUDA[0]
@CUDA[1]
def test_batch_graph_replays_equal_the_same_blocks_uncaptured(arch: str) -> None:
    target = model(arch, "cuda")
    graphed = StaticBatchAdapter(StaticAdapter(target, FastConfig(cuda_graphs=True)))
    eager = StaticBatchAdapter(StaticAdapter(target, FastConfig(cuda_graphs=True)))
    eager._graphs.graphs.enabled = False  # the same buckets, run kernel by kernel
    assert graphed._graphs.enabled
    adapters = (eager, graphed)
    generator = torch.Generator().manual_seed(0)
    ids, mask = padded(PROMPTS[:3])
    for adapter in adapters:
        adapter.begin(ids.cuda(), mask.cuda())
    _feed(adapters, list(ids.cuda()), [1, 1, 1])
    for widths in ([1, 1, 1], [3, 0, 5], [1, 1, 1], [9, 2, 1], [4, 4, 4]):
        tokens = [torch.randint(0, VOCAB, (n,), generator=generator).cuda() for n in widths]
        _feed(adapters, tokens, widths)
    prompt = torch.randint(0, VOCAB, (7,), generator=generator).cuda()
    for adapter in adapters:
        adapter.join(prompt)
        adapter.leave([3, 0, 1])
    _feed(adapters, [torch.tensor([n]).cuda() for n in (5, 6, 7)], [1, 1, 1])
    # (4 rows) x widths 1, 8, 16, 4: one capture each; the third round replays width 1
    assert graphed._graphs.graphs.capture_count == 4


@CUDA[0]
@CUDA[1]
def test_batched_output_with_graphs_equals_it_uncaptured_on_cuda() -> None:
    target = model("qwen2", "cuda")
    draft = noisy_copy(target, scale=0.02, seed=1)
    ids, mask = padded(PROMPTS)
    outs = []
    for graphs in (True, False):
        fast_target = make_fast(target, static=True, graphs=graphs)
        fast_draft = make_fast(draft, static=True, graphs=graphs)
        out = dynaspec.generate(
            fast_target, fast_draft, ids.cuda(), attention_mask=mask.cuda(),
            max_new_tokens=NEW, pad_token_id=0,
        )  # fmt: skip
        outs.append(out.sequences)
    assert torch.equal(outs[0], outs[1])
