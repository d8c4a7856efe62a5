"""Pairs are checked by their token lists, not only by the vocabulary's size (issue 24, 8).

A draft with the target's vocabulary size but other tokens (two GGUFs, two tokenizers) is
refused with an IncompatibleModelsError naming both models and what to use instead; for
two GGUFs the check reads only their headers, before either is converted.
"""

from __future__ import annotations

import hashlib
import importlib
import shutil
from pathlib import Path

import pytest
from test_loading import slice_packages
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from dynaspec import cli
from dynaspec.errors import DynaspecError, IncompatibleModelsError
from dynaspec.models import cache as model_cache
from dynaspec.models import loading
from dynaspec.models.presets import ModelPreset, PairPreset
from dynaspec.models.tiny import byte_tokenizer
from dynaspec.models.vocab import gguf_vocabulary, tokenizer_vocabulary, vocabulary_of

gguf = pytest.importorskip("gguf")
pytestmark = pytest.mark.usefixtures("keep_thread_count")

TOKENS = ["<|endoftext|>", *(chr(c) for c in range(33, 127)), "Ġ", "Ċ", "Ġt", "he", "Ġthe"]
# The same size, one token different: what two unrelated GGUFs of equal vocab size look like.
OTHER_TOKENS = [*TOKENS[:-1], "Ġcat"]


class Converted(Exception):
    """Raised by the monkeypatched conversion: the pair check let the load go on."""


def write_header(path: Path, tokens: list[str]) -> Path:
    """A GGUF that holds metadata only (no tensors): keys of every kind around the token
    list, so the reader must skip scalars, strings and arrays to find it."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("header-only")
    writer.add_block_count(1)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model("gpt2")
    writer.add_array("test.numbers", [1, 2, 3])
    writer.add_array("test.words", ["a", "bc"])
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * len(tokens))
    writer.add_token_merges(["Ġ t", "h e"])
    writer.add_eos_token_id(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture
def forbid_conversion(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A fresh model cache, and a conversion that raises Converted if it is ever reached."""

    def convert(*args: object, **kwargs: object) -> Path:
        raise Converted

    monkeypatch.setattr(model_cache, "build_folder", convert)
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path / "cache"))


def test_the_header_gives_the_token_list(tmp_path: Path) -> None:
    path = write_header(tmp_path / "a.gguf", TOKENS)
    vocabulary = gguf_vocabulary([path])
    assert vocabulary == vocabulary_of(enumerate(TOKENS))
    assert vocabulary is not None and vocabulary.size == len(TOKENS)
    other = gguf_vocabulary([write_header(tmp_path / "b.gguf", OTHER_TOKENS)])
    assert other is not None and other.size == vocabulary.size
    assert other.fingerprint != vocabulary.fingerprint


def test_the_header_is_read_across_slices_and_a_cut_header_gives_none(tmp_path: Path) -> None:
    payload = write_header(tmp_path / "whole.gguf", TOKENS).read_bytes()
    cuts = (0, 40, len(payload) // 2, len(payload) - 7, len(payload))
    slices = []
    for index, (start, end) in enumerate(zip(cuts, cuts[1:], strict=False)):
        part = tmp_path / f"part{index}"
        part.write_bytes(payload[start:end])
        slices.append(part)
    assert gguf_vocabulary(slices) == gguf_vocabulary([tmp_path / "whole.gguf"])
    (tmp_path / "cut.gguf").write_bytes(payload[: len(payload) // 2])
    assert gguf_vocabulary([tmp_path / "cut.gguf"]) is None
    (tmp_path / "not.gguf").write_bytes(b"PK\x03\x04" + payload[4:])
    assert gguf_vocabulary([tmp_path / "not.gguf"]) is None


def test_two_ggufs_with_the_same_size_but_other_tokens_are_refused_before_converting(
    tmp_path: Path, forbid_conversion: None
) -> None:
    target = write_header(tmp_path / "target.gguf", TOKENS)
    draft = write_header(tmp_path / "draft.gguf", OTHER_TOKENS)
    with pytest.raises(IncompatibleModelsError) as info:
        loading.load_models(target=str(target), draft=str(draft), dtype="float32")
    message = str(info.value)
    assert str(target) in message and str(draft) in message
    assert f"both {len(TOKENS)} tokens, but not the same token for every id" in message
    assert "draft=None" in message and "same model family" in message
    assert "--no-draft" in info.value.for_cli() and "--draft" in info.value.for_cli()


def test_two_ggufs_with_the_same_tokens_go_on_to_the_conversion(
    tmp_path: Path, forbid_conversion: None
) -> None:
    target = write_header(tmp_path / "target.gguf", TOKENS)
    draft = write_header(tmp_path / "draft.gguf", list(TOKENS))
    with pytest.raises(Converted):
        loading.load_models(target=str(target), draft=str(draft), dtype="float32")


def test_the_cli_says_it_in_flags(
    tmp_path: Path, forbid_conversion: None, capsys: pytest.CaptureFixture[str]
) -> None:
    target = write_header(tmp_path / "target.gguf", TOKENS)
    draft = write_header(tmp_path / "draft.gguf", OTHER_TOKENS)
    argv = ["generate", "--target", str(target), "--draft", str(draft), "hi"]
    code = cli.main(argv)
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "--no-draft" in line and "draft=None" not in line


def swapped_tokenizer_folder(folder: Path, tmp_path: Path) -> Path:
    """A copy of the tiny folder whose tokenizer has the same size, two ids swapped."""
    copy = tmp_path / "swapped"
    shutil.copytree(folder, copy)
    other = swapped_tokenizer()
    other.save_pretrained(copy)
    assert len(other) == len(byte_tokenizer())
    return copy


def test_two_tokenizers_with_the_same_size_but_other_tokens_are_refused(
    tiny_folder: Path, tmp_path: Path
) -> None:
    draft = swapped_tokenizer_folder(tiny_folder, tmp_path)
    with pytest.raises(IncompatibleModelsError) as info:
        loading.load_models(target=str(tiny_folder), draft=str(draft), dtype="float32")
    assert str(tiny_folder) in str(info.value) and str(draft) in str(info.value)
    assert "but not the same token for every id" in str(info.value)
    target, draft_model, _ = loading.load_models(
        target=str(tiny_folder), draft=str(tiny_folder), dtype="float32"
    )
    assert draft_model is not None


def test_the_tokenizer_fingerprint_is_the_token_list() -> None:
    tokenizer = byte_tokenizer()
    vocabulary = tokenizer_vocabulary(tokenizer)
    assert vocabulary.size == len(tokenizer)
    entries = [(i, token) for token, i in tokenizer.get_vocab().items()]
    assert vocabulary == vocabulary_of(reversed(entries))  # order-free
    first = entries[0]
    changed = [(first[0], first[1] + "x"), *entries[1:]]
    assert vocabulary_of(changed).fingerprint != vocabulary.fingerprint
    with pytest.raises(DynaspecError, match="pick a draft from the same model family"):
        loading._check_tokenizers(tokenizer, swapped_tokenizer())


def swapped_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny byte tokenizer with the ids of two tokens swapped: the same size."""
    vocab = byte_tokenizer().backend_tokenizer.get_vocab()
    vocab["Ā"], vocab["ā"] = vocab["ā"], vocab["Ā"]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>")


def sliced_preset(path: Path, name: str, site: Path) -> ModelPreset:
    """The GGUF at `path` cut into two slice packages under `site` (on sys.path), as a preset."""
    payload = path.read_bytes()
    prefix = f"dsvocab_{name}_{hashlib.sha1(str(site).encode()).hexdigest()[:10]}_part"
    slices = slice_packages(payload, site, prefix, name)
    return ModelPreset(
        name=name,
        model_id=f"test/{name}",
        role="standalone",
        architecture="llama",
        num_parameters=0,
        quantization="F32",
        gguf_name=f"{name}.gguf",
        version="0.0.1",
        slices=slices,
        sha256=hashlib.sha256(payload).hexdigest(),
    )


def test_a_pair_preset_of_two_token_lists_is_refused_before_converting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forbid_conversion: None
) -> None:
    site = tmp_path / "site"
    target = sliced_preset(write_header(tmp_path / "t.gguf", TOKENS), "tgt", site)
    draft = sliced_preset(write_header(tmp_path / "d.gguf", OTHER_TOKENS), "drf", site)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    table = {"tgt": target, "drf": draft}
    monkeypatch.setattr(loading, "get_model_preset", table.__getitem__)
    pair = PairPreset(name="mixed", target="tgt", draft="drf", description="")
    monkeypatch.setattr(loading, "get_pair_preset", lambda name: pair)
    with pytest.raises(IncompatibleModelsError, match="'drf' and the target 'tgt'"):
        loading.load_pair("mixed", dtype="float32")
    table["drf"] = sliced_preset(write_header(tmp_path / "d2.gguf", TOKENS), "drf2", site)
    importlib.invalidate_caches()
    with pytest.raises(Converted):
        loading.load_pair("mixed", dtype="float32")


def test_a_header_claiming_a_huge_array_gives_none(tmp_path: Path) -> None:
    header = b"GGUF" + (3).to_bytes(4, "little") + (0).to_bytes(8, "little")
    key = b"test.huge"
    entry = len(key).to_bytes(8, "little") + key + (9).to_bytes(4, "little")
    entry += (4).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little")
    (tmp_path / "huge.gguf").write_bytes(header + (1).to_bytes(8, "little") + entry + b"\0" * 64)
    assert gguf_vocabulary([tmp_path / "huge.gguf"]) is None
