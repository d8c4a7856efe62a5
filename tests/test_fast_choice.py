"""fast="auto": the rule per machine class (models.fast_choice), the library's one call on the
tiny pair (the target's exact output), and `dynaspec generate` / `serve` saying what they
chose. The CPU class is faked where a test needs another one; the real pair never loads."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_models import hf_greedy, random_prompts

import dynaspec
from dynaspec import cli
from dynaspec.backends.static import StaticAdapter
from dynaspec.errors import ConfigError, InsufficientMemoryError, ModelNotAvailableError
from dynaspec.models import fast_choice, loading
from dynaspec.models.arguments import apply_fast_choice
from dynaspec.models.dtype import CpuFeatures
from dynaspec.models.fast_choice import FastChoice, choose_fast

AVX512 = CpuFeatures(frozenset({"avx2", "avx512f", "avx512_bf16"}), "AVX512", known=True)
AVX2 = CpuFeatures(frozenset({"avx2"}), "AVX2", known=True)
STOP = "stopped by the test before loading"


def test_a_cpu_with_native_bf16_and_the_kernel_gets_the_4_bit_draft_and_lookup() -> None:
    choice = choose_fast("cpu", "bfloat16", features=AVX512, w4a8=True)
    assert (choice.static, choice.draft_quantize, choice.prompt_lookup) == (True, "w4a8", 32)
    assert choice.flags() == "--static --draft-quantize w4a8 --prompt-lookup 32"
    assert "avx512_bf16" in choice.machine and choice.record.startswith("benchmarks/")


def test_without_the_kernel_the_draft_keeps_its_dtype() -> None:
    choice = choose_fast("cpu", "bfloat16", features=AVX512, w4a8=False)
    assert (choice.static, choice.draft_quantize, choice.prompt_lookup) == (True, None, 32)


def test_a_cpu_in_float32_gets_the_static_pair_and_lookup() -> None:
    choice = choose_fast("cpu", "float32", features=AVX2, w4a8=True)
    assert (choice.static, choice.draft_quantize, choice.prompt_lookup) == (True, None, 32)
    assert "avx2" in choice.record


def test_a_gpu_and_an_unmeasured_dtype_get_nothing() -> None:
    for choice in (choose_fast("cuda"), choose_fast("cpu", "float16", features=AVX512)):
        assert (choice.static, choice.draft_quantize, choice.prompt_lookup) == (False, None, None)
        assert choice.flags() == "" and choice.generate_options() == {}


def test_generate_options_turn_prompt_lookup_on_under_adaptive() -> None:
    choice = FastChoice("a CPU", True, None, 32, "benchmarks/x")
    assert choice.generate_options() == {
        "prompt_lookup_num_tokens": 32,
        "num_assistant_tokens_schedule": "adaptive",
    }


@pytest.mark.parametrize(
    "given",
    [{"static": True}, {"compile": True}, {"quantize": "w8a8"}, {"draft_quantize": None}],
)
def test_auto_refuses_fast_options_beside_it(given: dict[str, Any]) -> None:
    if given == {"draft_quantize": None}:  # None is an explicit choice for the draft too
        given = {"draft_quantize": "w4a8"}
    with pytest.raises(ConfigError, match="fast='auto' chooses the fast path itself"):
        loading.load_model_set("tiny", fast="auto", **given)
    with pytest.raises(ConfigError, match="fast='auto' or fast=None"):
        loading.load_model_set("tiny", fast="fastest")


def test_the_tiny_pair_under_auto_keeps_the_targets_exact_output() -> None:
    """float32 (the tiny pair's dtype) chooses the static path and prompt lookup; every
    output equals transformers' own greedy decoding of the target as loaded."""
    reference = loading.load_model_set("tiny")
    models = loading.load_model_set("tiny", fast="auto")
    assert models.fast is not None and models.fast.static
    assert isinstance(models.target, StaticAdapter) and isinstance(models.draft, StaticAdapter)
    options = models.fast.generate_options()
    assert options["prompt_lookup_num_tokens"] == 32
    vocab = reference.target.config.vocab_size
    for prompt in random_prompts(4, vocab, min_len=3, max_len=12, seed=3):
        expected = hf_greedy(reference.target, prompt, 24)
        out = dynaspec.generate(models.target, models.draft, prompt, max_new_tokens=24, **options)
        assert torch.equal(out.sequences, expected[:, : out.sequences.shape[1]])
        assert out.sequences.shape == expected.shape


def test_the_pair_leaves_the_static_path_where_its_copy_does_not_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fits_only_without_the_copy(*args: Any) -> None:
        if args[-1]:  # the static path's copy of the target
            raise InsufficientMemoryError("no room")

    monkeypatch.setattr(loading, "_check_pair_memory", fits_only_without_the_copy)
    choice = FastChoice("a CPU", True, "w4a8", 32, "benchmarks/x")
    kept = loading._fitting_choice(choice, ("pair", torch.bfloat16, None, None))  # type: ignore[arg-type]
    assert kept is not None and not kept.static and kept.draft_quantize == "w4a8"
    assert "memory" in kept.record
    assert "too little memory for the static path's copy" in capsys.readouterr().err


# --- the CLI ---------------------------------------------------------------------------


class LoadRecorder:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *args: object, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        raise ModelNotAvailableError(STOP)


@pytest.fixture
def avx512(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LoadRecorder:
    """An AVX512-BF16 CPU whose w4a8 kernel builds; load_pair records and stops."""
    monkeypatch.setattr(fast_choice, "cpu_features", lambda: AVX512)
    monkeypatch.setattr(fast_choice, "w4a8_builds", lambda: True)
    monkeypatch.setattr(loading, "dtype_choice", loading.dtype_choice)
    monkeypatch.setenv("DYNASPEC_CACHE", str(tmp_path / "cache"))
    recorder = LoadRecorder()
    monkeypatch.setattr(loading, "load_pair", recorder)
    return recorder


def test_generate_says_what_it_chose_and_how_to_change_it(
    capsys: pytest.CaptureFixture[str], avx512: LoadRecorder
) -> None:
    assert cli.main(["generate", "hello", "--dtype", "bfloat16"]) == 1
    err = capsys.readouterr().err
    line = next(text for text in err.splitlines() if "--fast auto chose" in text)
    assert "--static --draft-quantize w4a8 --prompt-lookup 32" in line
    assert "--fast off" in line and "--quantize" in line and "benchmarks/" in line
    assert avx512.calls[0]["fast"] == "auto"


def test_fast_off_and_explicit_flags_keep_the_callers_choice(
    capsys: pytest.CaptureFixture[str], avx512: LoadRecorder
) -> None:
    assert cli.main(["generate", "hello", "--fast", "off"]) == 1
    assert "--fast auto chose" not in capsys.readouterr().err
    assert avx512.calls[-1]["fast"] is None and avx512.calls[-1]["static"] is False
    assert cli.main(["generate", "hello", "--dtype", "bfloat16", "--quantize", "w8a8"]) == 1
    call = avx512.calls[-1]
    assert call["fast"] is None and call["quantize"] == "w8a8"  # the caller's path
    assert "--fast auto chose --prompt-lookup 32" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "loadtest"])
def test_serve_and_loadtest_choose_as_generate_does(
    capsys: pytest.CaptureFixture[str], avx512: LoadRecorder, command: str
) -> None:
    assert cli.main([command, "--dtype", "bfloat16"]) == 1
    assert "--static --draft-quantize w4a8 --prompt-lookup 32" in capsys.readouterr().err
    assert avx512.calls[0]["fast"] == "auto"


def _args(**given: object) -> argparse.Namespace:
    flags = {
        "pair": "qwen2.5-coder", "target": None, "draft": None, "dtype": "bfloat16",
        "device": None, "fast": "auto", "static": False, "compile": False, "quantize": None,
        "draft_quantize": None, "draft_engine": "torch", "no_draft": False,
        "schedule": "adaptive", "prompt_lookup": None, "cross_tokenizer": False,
    }  # fmt: skip
    flags.update(given)
    return argparse.Namespace(**flags)


@pytest.mark.parametrize(
    ("given", "lookup"),
    [
        ({"prompt_lookup": 10}, 10),  # the caller's N
        ({"schedule": "dynamic"}, None),  # prompt lookup is chosen under adaptive only
        ({"no_draft": True}, None),  # the target alone was asked
        ({"pair": "tiny"}, None),  # the tiny pair runs as loaded
    ],
)
def test_prompt_lookup_is_chosen_only_where_asked_for_nothing_else(
    avx512: LoadRecorder, given: dict[str, Any], lookup: int | None
) -> None:
    args = _args(**given)
    apply_fast_choice(args)
    assert args.prompt_lookup == lookup


def test_the_automatic_path_on_a_gpu_adds_nothing(avx512: LoadRecorder) -> None:
    args = _args(device="cuda")
    choice = apply_fast_choice(args)
    assert choice is not None and choice.flags() == "" and args.prompt_lookup is None


def test_every_record_a_choice_names_is_committed() -> None:
    """The choice cites its records by folder: they must stand in benchmarks/."""
    root = Path(__file__).resolve().parents[1]
    choices = [
        choose_fast("cpu", "bfloat16", features=AVX512, w4a8=True),
        choose_fast("cpu", "bfloat16", features=AVX512, w4a8=False),
        choose_fast("cpu", "float32", features=AVX2),
        choose_fast("cuda"),
    ]
    for choice in choices:
        folder = choice.record.split(",")[0].split(" (")[0]
        assert (root / folder).is_dir(), choice.record
