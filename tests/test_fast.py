"""The fast path: static-cache adapter, compiled forwards, int8, w8a8 and w4a8 weights (backends/).

Lossless relative to the chosen target: speculative output equals the same fast target's own
greedy output, token for token, on tiny fp32 models. The static cache rolls back by moving
a position; stale and padded slots are never attended.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tiny_models import (
    assert_speculative_equals_alone,
    hf_greedy,
    noisy_copy,
    random_prompts,
    tiny_model,
)

import dynaspec
from dynaspec.backends.quant import Int8Linear
from dynaspec.backends.static import FastConfig, StaticAdapter, make_fast
from dynaspec.errors import ConfigError, UnsupportedModelError

VOCAB = 64


def pair(arch: str = "llama", layers: int = 2) -> tuple[torch.nn.Module, torch.nn.Module]:
    target = tiny_model(arch, vocab_size=VOCAB, num_layers=layers, hidden_size=32)
    return target, noisy_copy(target, scale=0.02, seed=1)


def feed(adapter: StaticAdapter, prompt: torch.Tensor, chunks: list[list[int]]) -> torch.Tensor:
    """Begin with `prompt`, feed each chunk; logits of every fed token, (n, V)."""
    adapter.begin(prompt, max_length=64)
    rows = [adapter.forward(prompt[0], prompt.shape[1])]
    rows += [adapter.forward(torch.tensor(c), len(c)) for c in chunks]
    return torch.cat(rows)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_static_decoder_matches_transformers_logits(arch: str) -> None:
    model, _ = pair(arch)
    ids = torch.randint(0, VOCAB, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        reference = model(ids).logits[0]  # (12, V)
    adapter = StaticAdapter(model, FastConfig(pad_to_buckets=True))
    # Chunks of 1, 3 (padded to 4) and 5 (padded to 8) tokens after a 3-token prompt.
    logits = feed(
        adapter, ids[:, :3], [ids[0, 3:4].tolist(), ids[0, 4:7].tolist(), ids[0, 7:].tolist()]
    )
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=1e-4)
    assert adapter.num_cached == 12


def test_rollback_moves_the_position_and_stale_slots_are_never_read() -> None:
    model, _ = pair()
    adapter = StaticAdapter(model, FastConfig(pad_to_buckets=True))
    prompt = torch.tensor([[5, 9, 2]])
    adapter.begin(prompt, max_length=40)
    cache = [t.data_ptr() for t in adapter._cache]
    adapter.forward(prompt[0], 1)
    adapter.forward(torch.tensor([7, 8, 9, 10, 11]), 5)  # bucket 8
    adapter.crop(4)
    after_a = adapter.forward(torch.tensor([1, 2]), 2)
    # The same prefix, then other tokens in the rolled-back slots: bitwise the same logits.
    adapter.begin(prompt, max_length=40)
    adapter.forward(prompt[0], 1)
    adapter.forward(torch.tensor([7, 30, 31, 32, 33]), 5)
    adapter.crop(4)
    after_b = adapter.forward(torch.tensor([1, 2]), 2)
    assert torch.equal(after_a, after_b)
    assert [t.data_ptr() for t in adapter._cache] == cache  # never reallocated
    assert adapter.capacity >= 40 + max(adapter.fast.buckets)


def test_padding_does_not_change_the_real_rows() -> None:
    """Three tokens padded to a bucket of 4 give the rows of the same 3 tokens fed alone."""
    model, _ = pair()
    adapter = StaticAdapter(model, FastConfig(buckets=(1, 4), pad_to_buckets=True))
    unpadded = StaticAdapter(model, FastConfig(pad_to_buckets=False))
    prompt = torch.tensor([[3, 4]])
    padded_rows = feed(adapter, prompt, [[10, 11, 12]])
    exact_rows = feed(unpadded, prompt, [[10, 11, 12]])
    torch.testing.assert_close(padded_rows, exact_rows, atol=1e-4, rtol=1e-4)


def test_cache_grows_without_a_length_hint() -> None:
    model, _ = pair()
    adapter = StaticAdapter(model)
    with torch.inference_mode():
        reference = model(torch.arange(300).remainder(VOCAB)[None]).logits[0, -1]
    adapter.begin(torch.tensor([[0]]))
    tokens = torch.arange(300).remainder(VOCAB)
    adapter.forward(tokens[:1], 1)
    for start in range(1, 300, 20):
        last = adapter.forward(tokens[start : start + 20], 1)[-1]
    torch.testing.assert_close(last, reference, atol=1e-4, rtol=1e-4)


SCHEDULES = ["constant", "heuristic", "dynamic", "adaptive"]


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("arch,pad", [("llama", False), ("qwen2", False), ("llama", True)])
def test_static_target_and_draft_equal_the_target_alone(arch: str, pad: bool, schedule: str):
    target, draft = pair(arch)
    config = FastConfig(pad_to_buckets=pad)
    fast_target, fast_draft = StaticAdapter(target, config), StaticAdapter(draft, config)
    for prompt in random_prompts(3, VOCAB, seed=2):
        alone = dynaspec.generate(fast_target, None, prompt, max_new_tokens=20)
        assert torch.equal(alone.sequences, hf_greedy(target, prompt, 20))
        out = dynaspec.generate(
            fast_target,
            fast_draft,
            prompt,
            max_new_tokens=20,
            num_assistant_tokens=4,
            num_assistant_tokens_schedule=schedule,
        )
        assert torch.equal(out.sequences, alone.sequences)


@pytest.mark.parametrize("quantize", ["int8"])
def test_quantized_draft_never_changes_the_output(quantize: str) -> None:
    target, draft = pair()
    quantized_draft = make_fast(draft, quantize=quantize)
    for prompt in random_prompts(3, VOCAB, seed=3):
        out = dynaspec.generate(
            target, quantized_draft, prompt, max_new_tokens=20, num_assistant_tokens=4
        )
        assert torch.equal(out.sequences, hf_greedy(target, prompt, 20))


@pytest.mark.parametrize("quantize", ["int8"])
@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
def test_quantized_target_speculative_equals_quantized_target_alone(
    quantize: str, schedule: str
) -> None:
    target, draft = pair()
    fast_target = make_fast(target, quantize=quantize)
    fast_draft = make_fast(draft, quantize="int8")
    prompts = random_prompts(3, VOCAB, seed=4)
    assert_speculative_equals_alone(
        fast_target,
        fast_draft,
        prompts,
        num_assistant_tokens=5,
        num_assistant_tokens_schedule=schedule,
    )


def test_sampling_with_static_adapters_is_seeded() -> None:
    target, draft = pair()
    fast_target, fast_draft = make_fast(target, quantize="int8"), StaticAdapter(draft)
    kwargs = dict(max_new_tokens=12, do_sample=True, seed=7, top_k=10)
    first = dynaspec.generate(fast_target, fast_draft, torch.tensor([[1, 2]]), **kwargs)
    second = dynaspec.generate(fast_target, fast_draft, torch.tensor([[1, 2]]), **kwargs)
    assert torch.equal(first.sequences, second.sequences)
    assert first.sequences.shape[1] == 14


def test_compiled_layer_scope_is_lossless_and_reports_compile_time() -> None:
    target, draft = pair(layers=1)
    config = FastConfig(compile=True, buckets=(1, 4))
    fast_target, fast_draft = StaticAdapter(target, config), StaticAdapter(draft, config)
    prompt = torch.tensor([[1, 2, 3]])
    assert fast_target.warmup(40) > 0  # compiles each bucket once
    compiled = fast_target.compile_time_s
    alone = dynaspec.generate(fast_target, None, prompt, max_new_tokens=16)
    out = dynaspec.generate(
        fast_target, fast_draft, prompt, max_new_tokens=16, num_assistant_tokens=3
    )
    assert torch.equal(out.sequences, alone.sequences)
    assert torch.equal(alone.sequences, hf_greedy(target, prompt, 16))
    assert fast_target.compile_time_s == compiled  # nothing compiled again


def test_compiled_model_scope_int8_is_lossless() -> None:
    target, draft = pair(layers=1)
    config = FastConfig(compile=True, quantize="int8", compile_scope="model", buckets=(1, 4))
    fast_target = StaticAdapter(target, config)
    fast_draft = make_fast(draft, quantize="int8")
    eager_target = make_fast(target, quantize="int8")
    prompt = torch.tensor([[4, 5]])
    alone = dynaspec.generate(fast_target, None, prompt, max_new_tokens=12)
    eager = dynaspec.generate(eager_target, None, prompt, max_new_tokens=12)
    out = dynaspec.generate(
        fast_target, fast_draft, prompt, max_new_tokens=12, num_assistant_tokens=3
    )
    assert torch.equal(out.sequences, alone.sequences)
    assert torch.equal(alone.sequences, eager.sequences)
    assert fast_target.compile_time_s > 0


def test_adapters_expose_what_generate_and_the_cli_read() -> None:
    target = tiny_model("llama", vocab_size=VOCAB, eos_token_id=7)
    adapter = make_fast(target, quantize="int8")
    assert adapter.config is target.config
    assert adapter.generation_config.eos_token_id == 7
    assert adapter.device == torch.device("cpu")
    assert adapter.vocab_size == VOCAB and adapter.max_length == 128
    assert make_fast(target) is target  # no option: the model itself


def test_nothing_is_written_onto_the_model() -> None:
    target, draft = pair()
    before = (
        target.config.to_dict(),
        set(vars(target)),
        {k: v.clone() for k, v in target.state_dict().items()},
    )
    fast = make_fast(target, compile=False, quantize="int8")
    dynaspec.generate(
        fast, make_fast(draft, quantize="int8"), torch.tensor([[1]]), max_new_tokens=6
    )
    after = (target.config.to_dict(), set(vars(target)), target.state_dict())
    assert after[0] == before[0] and after[1] == before[1]
    assert all(torch.equal(after[2][k], v) for k, v in before[2].items())


@pytest.mark.parametrize("quantize", ["int8"])
def test_released_weights_are_freed_and_the_adapter_still_decodes_the_same(quantize) -> None:
    """`release`: each linear weight the copy replaced is freed while the copy is built (the
    loaders own the model), and the adapter decodes exactly what an unreleased one does."""
    target, _ = pair()
    kept = make_fast(target, quantize=quantize)
    prompt = torch.tensor([[3, 1, 4, 1, 5]])
    want = dynaspec.generate(kept, None, prompt, max_new_tokens=8).sequences
    owned, _ = pair()
    released = make_fast(owned, quantize=quantize, release=True)
    linears = [m for m in owned.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.numel() == 0 for m in linears)
    assert owned.model.embed_tokens.weight.numel() > 0  # the embedding is still used
    assert torch.equal(dynaspec.generate(released, None, prompt, max_new_tokens=8).sequences, want)


def test_release_keeps_weights_the_adapter_computes_from(monkeypatch) -> None:
    """Without a copy (a CPU whose oneDNN cannot prepack the dtype) the adapter runs the
    model's own weights: nothing is freed. With one (float32 prepacked), all are."""
    from dynaspec.backends import quant

    owned, _ = pair()
    with monkeypatch.context() as patch:
        patch.setattr(quant, "can_prepack", lambda weight: False)
        make_fast(owned, static=True, release=True)
    linears = [m for m in owned.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.weight.numel() > 0 for m in linears)
    packed, _ = pair()
    make_fast(packed, static=True, release=True)
    linears = [m for m in packed.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.numel() == 0 for m in linears)


def test_float32_prepacked_rows_are_the_one_token_rows() -> None:
    """A float32 weight is reordered for no batch size: on an AVX2 CPU each row of a
    many-token product is bitwise the one-token product (a verification sees exactly the
    logits a step would); elsewhere (other oneDNN kernels) the rows agree to rounding."""
    from dynaspec.backends.quant import PackedLinear

    layer = torch.nn.Linear(96, 160)
    packed = PackedLinear(layer)
    assert packed.dense.packed  # float32 is prepacked on every CPU with oneDNN
    rows = torch.randn(9, 96)
    together = packed(rows)
    alone = torch.cat([packed(rows[i : i + 1]) for i in range(9)])
    if torch.backends.cpu.get_cpu_capability() == "AVX2":
        assert torch.equal(together, alone)
    torch.testing.assert_close(together, alone, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(together, layer(rows), rtol=1e-5, atol=1e-5)


def test_unsupported_architecture_and_options() -> None:
    gpt2 = tiny_model("gpt2", vocab_size=VOCAB)
    with pytest.raises(UnsupportedModelError, match="without quantize='int8'") as info:
        make_fast(gpt2, quantize="int8")
    assert "drop --quantize int8" in info.value.for_cli()
    for options, python, cli in [
        ({"static": True}, "without static=True", "drop --static"),
        ({"compile": True}, "without compile=True", "drop --compile"),
        ({"static": True, "quantize": "w4a8", "draft": True}, "draft_quantize='w4a8'", "--draft"),
    ]:
        with pytest.raises(UnsupportedModelError, match=python) as info:
            make_fast(gpt2, **options)
        assert cli in info.value.for_cli() and "'gpt2'" in str(info.value)
    with pytest.raises(ConfigError, match="unknown quantize"):
        make_fast(tiny_model("llama", vocab_size=VOCAB), quantize="int3")
    with pytest.raises(ConfigError, match="compile_scope"):
        FastConfig(compile_scope="graph")


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_int8_linear_close_to_its_dequantized_weights(rows: int) -> None:
    generator = torch.Generator().manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=True)
    x = torch.randn(rows, 64, generator=generator)
    quantized = Int8Linear(linear.weight.detach(), linear.bias)
    dense = quantized.int8_codes().float() * quantized.scale[:, None]
    torch.testing.assert_close(quantized(x), F.linear(x, dense, linear.bias), atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(quantized(x), linear(x), atol=0.05, rtol=0.05)


def test_bench_fast_methods_compare_with_their_own_target(tmp_path) -> None:
    import argparse
    import json

    from dynaspec.eval.bench import run as bench
    from dynaspec.eval.bench.args import add_bench_arguments

    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    methods = "fast-adaptive,int8-adaptive"
    argv = ["--smoke", "--max-new-tokens", "8", "--no-progress", "--methods", methods]
    status = bench.run_bench(parser.parse_args([*argv, "--out", str(tmp_path)]))
    assert status == 0
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    by_method: dict[str, list[dict]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).append(record)
    # The references run too: each fast method's own target alone.
    assert set(by_method) == {
        "target",
        "static-target",
        "fast-adaptive",
        "int8-target",
        "int8-adaptive",
    }
    for name, reference in [("fast-adaptive", "static-target"), ("int8-adaptive", "int8-target")]:
        for record in by_method[name]:
            assert record["reference_method"] == reference and record["matches_target"] is True
            assert record["weight_bytes"] > 0
    assert all(r["matches_target"] is None for r in by_method["int8-target"])  # not compared
    assert all(r["family"] == "fast" for r in by_method["int8-adaptive"])
    table = (tmp_path / "table.md").read_text()
    assert "| int8-adaptive |" in table.split("Fast methods")[1]
    assert "**BUG**" not in table  # uncompared methods are not mismatches


def test_the_bench_eager_variant_is_the_model_as_loaded() -> None:
    from dynaspec.eval.bench.fast import FAST_METHODS, FastModels, _describe, _weight_bytes

    target, draft = tiny_model("qwen2", vocab_size=VOCAB), tiny_model("qwen2", vocab_size=VOCAB)
    models = FastModels(target, draft, compile=False, max_length=64)
    assert models.adapter("target", "eager") is target
    assert _weight_bytes(target) == sum(p.numel() * p.element_size() for p in target.parameters())
    assert _describe(target) == "Qwen2ForCausalLM (as loaded: transformers' forward)"
    # the transformers target with the 4-bit draft: compared with the eager target alone
    for name in ("adaptive-w4a8", "hybrid-w4a8"):
        assert (FAST_METHODS[name].target, FAST_METHODS[name].reference) == ("eager", "target")


@pytest.mark.parametrize("rows", [1, 5])
def test_prepacked_bf16_linear_equals_the_original(rows: int) -> None:
    from dynaspec.backends.quant import PackedLinear, can_prepack

    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    x = torch.randn(rows, 64, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    packed = PackedLinear(linear)  # prepacked where oneDNN has a bf16 path, else plain
    assert packed.dense.packed == can_prepack(linear.weight)
    assert torch.equal(packed(x), linear(x))


def test_static_bf16_adapter_follows_transformers_logits() -> None:
    model = tiny_model("qwen2", vocab_size=VOCAB, hidden_size=32).to(torch.bfloat16)
    ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        reference = model(ids).logits[0].float()
    adapter = make_fast(model, static=True)
    logits = feed(adapter, ids[:, :4], [ids[0, 4:].tolist()]).float()
    assert (logits.argmax(-1) == reference.argmax(-1)).all()
    torch.testing.assert_close(logits, reference, atol=0.1, rtol=0.05)
