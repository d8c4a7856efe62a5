"""CUDA graphs on the static path (backends/graphs.py): bucket padding, exercised on the CPU
where the seam is an identity, and the capture itself on a GPU (tests marked cuda).

On the CPU the adapters prepack their float32 weights (`static=True`'s layout), whose rows of
a many-token product are bitwise the one-token rows: so a verification padded to its bucket
must give exactly the logits of the unpadded one, and leave exactly the same cache."""

from __future__ import annotations

import pytest
import torch
from tiny_models import CUDA, noisy_copy, random_prompts, tiny_model

import dynaspec
from dynaspec.backends.decoder import _kernel_runs
from dynaspec.backends.graphs import GraphForwards, bucket_for, verify_buckets
from dynaspec.backends.static import FastConfig, StaticAdapter, make_fast
from dynaspec.errors import ConfigError

VOCAB = 64


def model(arch: str = "llama", device: str = "cpu") -> torch.nn.Module:
    return tiny_model(arch, vocab_size=VOCAB, num_layers=2, hidden_size=32).to(device)


def test_bucket_for_picks_the_smallest_bucket_that_holds_the_tokens() -> None:
    buckets = (1, 2, 4, 8, 16, 32)
    assert [bucket_for(n, buckets) for n in (1, 2, 3, 5, 8, 9, 16, 17, 32)] == [
        1, 2, 4, 8, 8, 16, 16, 32, 32,
    ]  # fmt: skip
    assert bucket_for(33, buckets) == 33  # past the largest: as it is (a prefill)


def test_the_seam_is_an_identity_off_cuda() -> None:
    calls = []

    def forward(x: torch.Tensor) -> torch.Tensor:
        calls.append(x)
        return x + 1

    runner = GraphForwards(forward, torch.device("cpu"))
    assert not runner.enabled
    out = runner((4,), "cache", torch.zeros(3))
    assert torch.equal(out, torch.ones(3)) and len(calls) == 1 and runner.capture_count == 0


def test_the_host_attention_kernel_never_takes_a_gpus_caches() -> None:
    """kernels/attention.py is a C call on host memory: over caches elsewhere (here on the
    meta device, as a GPU's would be) attention takes torch's path, whatever the CPU."""
    query = torch.empty(1, 4, 1, 64, dtype=torch.bfloat16, device="meta")
    cache = torch.empty(1, 2, 256, 64, dtype=torch.bfloat16, device="meta")
    assert not _kernel_runs(query, cache, cache)


def test_graphs_and_compile_are_refused_together() -> None:
    with pytest.raises(ConfigError, match="choose one"):
        FastConfig(compile=True, cuda_graphs=True)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_padded_verification_gives_the_unpadded_logits_and_cache(arch: str) -> None:
    target = model(arch)
    plain = StaticAdapter(target, FastConfig(prepack=True))
    graphed = StaticAdapter(target, FastConfig(prepack=True, cuda_graphs=True))
    assert plain.verify_buckets == () and graphed.verify_buckets == (1, 2, 4, 8, 16, 32)
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, VOCAB, (1, 7), generator=generator)
    for adapter in (plain, graphed):
        adapter.begin(prompt, max_length=120)
        adapter.forward(prompt[0], 1)
    for n in range(1, 20):  # every width, most padded (3 -> 4, 9 -> 16, ...)
        tokens = torch.randint(0, VOCAB, (n,), generator=generator)
        expected = plain.forward(tokens, n)
        assert torch.equal(graphed.forward(tokens, n), expected), f"n = {n}"
        assert graphed.num_cached == plain.num_cached
        kept = plain.num_cached - n // 2  # reject the later half, as a round does
        plain.crop(kept)
        graphed.crop(kept)
        for ours, theirs in zip(graphed._cache, plain._cache, strict=True):
            assert torch.equal(ours[:, :, :kept], theirs[:, :, :kept])


def test_speculative_output_with_graph_buckets_equals_the_target_alone() -> None:
    target = model("qwen2")
    fast = make_fast(target, static=True, graphs=True)
    draft = make_fast(noisy_copy(target, scale=0.02, seed=1), static=True, graphs=True)
    assert verify_buckets(fast) == (1, 2, 4, 8, 16, 32) and verify_buckets(target) == ()
    for schedule in ("adaptive", "dynamic", "constant"):
        for prompt in random_prompts(3, VOCAB, seed=2):
            alone = dynaspec.generate(fast, None, prompt, max_new_tokens=24)
            out = dynaspec.generate(
                fast, draft, prompt, max_new_tokens=24, num_assistant_tokens_schedule=schedule,
                num_assistant_tokens=11,
            )  # fmt: skip
            assert torch.equal(out.sequences, alone.sequences), schedule


# ---- on a GPU: the capture itself -------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@CUDA[0]
@CUDA[1]
def test_graph_replays_equal_the_same_forwards_uncaptured(arch: str) -> None:
    target = model(arch, "cuda")
    graphed = StaticAdapter(target, FastConfig(cuda_graphs=True))
    eager = graphed.fork()
    eager._graphs.enabled = False  # the same padding and shapes, run kernel by kernel
    assert graphed._graphs.enabled
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, VOCAB, (1, 9), generator=generator)
    for adapter in (graphed, eager):
        adapter.begin(prompt, max_length=200)
        adapter.forward(prompt[0], 1)
    for n in (1, 3, 1, 8, 9, 1, 5, 16, 2):
        tokens = torch.randint(0, VOCAB, (n,), generator=generator).cuda()
        assert torch.equal(graphed.forward(tokens, n), eager.forward(tokens, n)), f"n = {n}"
        graphed.crop(graphed.num_cached - 1)
        eager.crop(eager.num_cached - 1)
    assert graphed._graphs.capture_count == 5  # buckets 1, 2, 4, 8, 16 (the prompt: 16)
    for ours, theirs in zip(graphed._cache, eager._cache, strict=True):
        kept = graphed.num_cached
        assert torch.equal(ours[:, :, :kept], theirs[:, :, :kept])


@CUDA[0]
@CUDA[1]
def test_graphs_are_captured_again_when_the_cache_grows() -> None:
    graphed = StaticAdapter(model("llama", "cuda"), FastConfig(cuda_graphs=True))
    prompt = torch.tensor([[1, 2, 3]])
    graphed.begin(prompt, max_length=16)
    graphed.forward(prompt[0].cuda(), 1)
    graphed.forward(torch.tensor([4]).cuda(), 1)
    assert graphed._graphs.capture_count == 2  # buckets 4 (the prompt) and 1
    graphed.begin(prompt, max_length=1000)  # a longer sequence: a new, larger cache
    graphed.forward(prompt[0].cuda(), 1)
    graphed.forward(torch.tensor([4]).cuda(), 1)
    assert graphed._graphs.capture_count == 4


@CUDA[0]
@CUDA[1]
def test_speculative_output_with_graphs_equals_it_uncaptured_on_cuda() -> None:
    target = model("qwen2", "cuda")
    fast = make_fast(target, graphs=True)
    draft = make_fast(noisy_copy(target, scale=0.02, seed=1), graphs=True)
    plain_fast, plain_draft = fast.fork(), draft.fork()
    plain_fast._graphs.enabled = plain_draft._graphs.enabled = False
    for prompt in random_prompts(3, VOCAB, seed=2):
        ours = dynaspec.generate(fast, draft, prompt.cuda(), max_new_tokens=24)
        theirs = dynaspec.generate(plain_fast, plain_draft, prompt.cuda(), max_new_tokens=24)
        assert torch.equal(ours.sequences, theirs.sequences)
