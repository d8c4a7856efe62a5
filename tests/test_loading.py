"""Loading through the model cache, on a tiny llama GGUF written by the test."""

from __future__ import annotations

import functools
import hashlib
import importlib
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dynaspec.errors import (
    ConfigError,
    CorruptModelFileError,
    IncompatibleModelsError,
    ModelNotAvailableError,
)
from dynaspec.models import cache as model_cache
from dynaspec.models import loading, progress
from dynaspec.models.dtype import machine_dtype
from dynaspec.models.presets import GgufSlice, ModelPreset, model_presets

gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")

HIDDEN, HEADS, KV_HEADS, FFN = 32, 2, 1, 64  # multiples of 32: Q8_0 rows


def write_tiny_gguf(path: Path, extra_tokens: tuple[str, ...] = ()) -> bytes:
    """A 1-layer llama GGUF with a small byte-level BPE tokenizer; returns its bytes."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tokens = [*specials, *(chr(c) for c in range(33, 127)), "Ġ", "Ċ", "Ġt", "he", "Ġthe"]
    tokens += list(extra_tokens)
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    types = [gguf.TokenType.CONTROL] * len(specials)
    writer.add_token_types(types + [gguf.TokenType.NORMAL] * (vocab - len(specials)))
    writer.add_token_merges(["Ġ t", "h e", "Ġt he"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(False)
    rng = np.random.default_rng(0)
    head_dim = HIDDEN // HEADS

    def dense(name: str, shape: tuple[int, int]) -> None:
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.2).astype(np.float32))

    def q8(name: str, shape: tuple[int, int]) -> None:  # exercises dequantization
        weights = (rng.standard_normal(shape) * 0.2).astype(np.float32)
        packed = gguf.quants.quantize(weights, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, packed, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    dense("token_embd.weight", (vocab, HIDDEN))
    dense("output.weight", (vocab, HIDDEN))
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    dense("blk.0.attn_q.weight", (HEADS * head_dim, HIDDEN))
    dense("blk.0.attn_k.weight", (KV_HEADS * head_dim, HIDDEN))
    dense("blk.0.attn_v.weight", (KV_HEADS * head_dim, HIDDEN))
    dense("blk.0.attn_output.weight", (HIDDEN, HEADS * head_dim))
    q8("blk.0.ffn_gate.weight", (FFN, HIDDEN))
    q8("blk.0.ffn_up.weight", (FFN, HIDDEN))
    q8("blk.0.ffn_down.weight", (HIDDEN, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "tiny.gguf"
    write_tiny_gguf(path)
    return path


def slice_packages(payload: bytes, site: Path, prefix: str, name: str) -> tuple[GgufSlice, ...]:
    """`payload` cut in two, each half a package `<prefix><i>` under `site` (model.bin)."""
    half = len(payload) // 2
    slices = []
    for index, chunk in enumerate((payload[:half], payload[half:]), start=1):
        folder = site / f"{prefix}{index}"
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
        (folder / "model.bin").write_bytes(chunk)
        slices.append(GgufSlice(f"{name}-part{index}", f"{prefix}{index}", "model.bin", len(chunk)))
    return tuple(slices)


@pytest.fixture
def tiny_preset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_gguf: Path) -> ModelPreset:
    """The tiny GGUF cut into two slice packages on sys.path, as a preset."""
    payload = tiny_gguf.read_bytes()
    site = tmp_path / "site"
    prefix = f"dstiny_{hashlib.sha1(str(tmp_path).encode()).hexdigest()[:10]}_part"
    slices = slice_packages(payload, site, prefix, "tiny")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return ModelPreset(
        name="tiny",
        model_id="test/tiny",
        role="standalone",
        architecture="llama",
        num_parameters=0,
        quantization="Q8_0",
        gguf_name="tiny.gguf",
        version="0.0.1",
        slices=slices,
        sha256=hashlib.sha256(payload).hexdigest(),
        eos_token_ids=(2, 0),
    )


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture(autouse=True)
def keep_thread_count():
    """load_model() sets torch's thread count; give other tests back the one they had."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def logits(model: torch.nn.Module, token_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([token_ids])).logits  # (1, T, V)


def test_preset_loads_through_the_cache(tiny_preset, cache, tmp_path):
    model, tokenizer = loading.load_preset(
        tiny_preset, dtype="float32", threads=1, cache_dir=cache, progress=False
    )
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert torch.get_num_threads() == 1
    folder = model_cache.preset_folder(tiny_preset, torch.float32, cache)
    assert model_cache.is_complete_folder(folder)
    assert not model_cache.joined_gguf_path(tiny_preset, cache).exists()  # deleted after save
    assert model.generation_config.eos_token_id == [2, 0]
    token_ids = tokenizer.encode("the cat", add_special_tokens=False)
    assert tokenizer.decode(token_ids) == "the cat"
    first = logits(model, token_ids)

    # the slices are gone: the second load can only come from the cache
    for piece in tiny_preset.slices:
        (tmp_path / "site" / piece.module / piece.path).unlink()
    again, _ = loading.load_preset(tiny_preset, dtype="float32", threads=1, cache_dir=cache)
    assert torch.equal(logits(again, token_ids), first)


def test_the_first_use_says_it_converts_before_the_silence(tiny_preset, cache, capsys):
    loading.load_preset(tiny_preset, dtype="float32", threads=1, cache_dir=cache)
    said = capsys.readouterr().err
    assert "tiny: first use: converting the GGUF to a transformers folder in float32" in said
    assert said.index("first use") < said.index("joining")  # before the slow part
    # each step without a bar of its own is announced, in order
    steps = ["joining", "reading and dequantizing", "writing the float32 folder", "converted into"]
    assert [said.index(step) for step in steps] == sorted(said.index(step) for step in steps)
    loading.load_preset(tiny_preset, dtype="float32", threads=1, cache_dir=cache)
    assert "first use" not in capsys.readouterr().err  # from the cache: nothing to say


def test_a_step_without_progress_of_its_own_ticks_on_one_line(capsys):
    from transformers.utils import logging as hf_logging

    assert hf_logging.is_progress_bar_enabled()
    reader = importlib.import_module(progress.GGUF_READER)
    with progress.ticking("reading and dequantizing x.gguf"):
        assert not hf_logging.is_progress_bar_enabled()  # transformers' bars held back
        list(reader.tqdm(range(3), desc="Converting GGUF"))  # its reader's too
        time.sleep(1.3)
    said = capsys.readouterr().err
    assert said.count("reading and dequantizing x.gguf: ") >= 2  # redrawn as the time runs
    assert "Converting GGUF" not in said
    assert hf_logging.is_progress_bar_enabled()  # and shown again after
    assert not isinstance(reader.tqdm, functools.partial)
    with progress.ticking("quiet", enabled=False):
        pass
    assert capsys.readouterr().err == ""


def test_cached_weights_have_the_requested_dtype(tiny_preset, cache):
    from safetensors import safe_open

    model, _ = loading.load_preset(tiny_preset, dtype="bfloat16", cache_dir=cache, progress=False)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    folder = model_cache.preset_folder(tiny_preset, torch.bfloat16, cache)
    with safe_open(str(folder / "model.safetensors"), "pt") as stored:
        assert {stored.get_tensor(key).dtype for key in stored.keys()} == {torch.bfloat16}  # noqa: SIM118
    assert model_cache.cached_dtypes(tiny_preset, cache) == ("bfloat16",)


def test_a_converted_folder_is_written_in_shards_so_its_bar_moves(
    tiny_preset, cache, tmp_path, monkeypatch
):
    whole, _ = loading.load_preset(tiny_preset, dtype="float32", cache_dir=cache, progress=False)
    one = model_cache.preset_folder(tiny_preset, torch.float32, cache)
    assert (one / "model.safetensors").is_file()  # the tiny model fits one shard
    monkeypatch.setattr(model_cache, "SHARD_SIZE", "4KB")  # smaller than the tiny model
    other = tmp_path / "other-cache"
    sharded, _ = loading.load_preset(tiny_preset, dtype="float32", cache_dir=other, progress=False)
    folder = model_cache.preset_folder(tiny_preset, torch.float32, other)
    assert len(list(folder.glob("model-*-of-*.safetensors"))) >= 2
    assert (folder / "model.safetensors.index.json").is_file()
    expected = whole.state_dict()
    assert all(torch.equal(value, expected[key]) for key, value in sharded.state_dict().items())


def test_gguf_file_path_and_folder_load_alike(tiny_gguf, cache, tmp_path):
    model, tokenizer = loading.load_model(tiny_gguf, dtype="auto", cache_dir=cache)
    assert next(model.parameters()).dtype == torch.float32  # auto: GGUF's own precision
    folders = [p for p in (cache / "hf").iterdir() if p.name.startswith("file-tiny-")]
    assert len(folders) == 1 and folders[0].name.endswith("-float32")
    token_ids = tokenizer.encode("the the", add_special_tokens=False)

    saved = tmp_path / "saved"
    model.save_pretrained(saved)
    tokenizer.save_pretrained(saved)
    reloaded, _ = loading.load_model(str(saved), dtype="auto")
    assert not reloaded.training
    assert torch.equal(logits(reloaded, token_ids), logits(model, token_ids))


def test_damaged_cache_folder_says_how_to_fix(tiny_preset, cache):
    loading.load_preset(tiny_preset, dtype="float32", cache_dir=cache, progress=False)
    weights = model_cache.preset_folder(tiny_preset, torch.float32, cache) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(CorruptModelFileError, match="delete that folder"):
        loading.load_preset(tiny_preset, dtype="float32", cache_dir=cache)


def test_pair_check(tiny_gguf, tmp_path, cache):
    model, tokenizer = loading.load_model(tiny_gguf, dtype="float32", cache_dir=cache)
    loading.check_pair_compatible(model, model, tokenizer, tokenizer)

    other_path = tmp_path / "other.gguf"
    write_tiny_gguf(other_path, extra_tokens=("Ġcat",))
    other, other_tokenizer = loading.load_model(other_path, dtype="float32", cache_dir=cache)
    with pytest.raises(IncompatibleModelsError, match="vocabulary"):
        loading.check_pair_compatible(model, other, tokenizer, other_tokenizer)
    with pytest.raises(IncompatibleModelsError, match="lm_head rows"):
        loading.check_pair_compatible(model, other, tokenizer, tokenizer)


def test_dtype_and_thread_arguments():
    assert loading.resolve_dtype("bf16", auto_means=torch.float32) is torch.bfloat16
    assert loading.resolve_dtype(torch.float16, auto_means="auto") is torch.float16
    assert loading.resolve_dtype("auto", auto_means="auto") == "auto"
    assert loading.resolve_dtype("AUTO", auto_means=torch.float32) is torch.float32
    machine = machine_dtype().dtype
    assert loading.resolve_dtype(None, auto_means="auto") is machine
    assert loading.resolve_dtype("machine", auto_means="auto") is machine
    with pytest.raises(ConfigError, match="bfloat16"):
        loading.resolve_dtype("int8", auto_means="auto")
    before = torch.get_num_threads()
    try:
        assert loading.set_threads(1) == 1 and torch.get_num_threads() == 1
        assert loading.set_threads(None) >= 1
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ConfigError, match="positive"):
        loading.set_threads(0)


def test_unknown_names_and_paths(tmp_path):
    with pytest.raises(ConfigError, match="qwen2.5-coder-1.5b"):
        loading.load_model("no-such-model")
    with pytest.raises(ConfigError, match="check the path"):
        loading.load_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ModelNotAvailableError, match="config.json"):
        loading.load_model(tmp_path)
    with pytest.raises(ConfigError, match="qwen2.5-coder"):
        loading.load_pair("no-such-pair")


def test_models_report(tmp_path):
    smollm2 = model_presets()["smollm2-135m"]
    folder = model_cache.preset_folder(smollm2, torch.bfloat16, tmp_path)
    folder.mkdir(parents=True)
    (folder / model_cache.MARKER_NAME).write_text("{}")
    report = loading.models_report(cache_dir=tmp_path)
    lines = report.splitlines()
    header = ["name", "role", "tokenizer", "params", "download", "converted", "installed", "cached"]
    assert lines[0].split() == header
    for name in model_presets():
        assert any(line.startswith(name + " ") for line in lines)
    smol_line = next(line for line in lines if line.startswith("smollm2-135m "))
    assert smol_line.endswith("bfloat16") and "135M" in smol_line and "98 MB" in smol_line
    assert "smollm2 (49,152)" in smol_line and "--cross-tokenizer" in report
    # converted: the parameters in this machine's dtype (2 or 4 bytes each), said below
    itemsize = machine_dtype().dtype.itemsize
    assert f" {smollm2.num_parameters * itemsize / 1e6:.0f} MB " in smol_line
    assert "download: the model packages (a quantized GGUF); converted: the" in report
    assert "qwen2.5-coder (default): qwen2.5-coder-1.5b + qwen2.5-coder-0.5b" in report
    assert f"cache: {tmp_path}" in report
    assert f"dtype on this machine: {machine_dtype().line()}" in report
