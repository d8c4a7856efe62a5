"""Bad input gets a typed error (dynaspec.errors) whose message says how to fix it.

Each test checks the error type, that it is a DynaspecError, and a phrase of the fix. Where
the check is meant to run before any model does, a scripted model proves no forward ran.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from tiny_models import ScriptedModel, shift_rule, tiny_model

import dynaspec
from dynaspec.errors import (
    ConfigError,
    DynaspecError,
    IncompatibleModelsError,
    InputError,
    NumericalError,
    UnsupportedModelError,
    UnsupportedOptionError,
)

VOCAB_SIZE = 16
PROMPT = torch.tensor([[1, 2, 3]])
# A schedule that always runs the draft (adaptive may decide a short run is not worth it).
DRAFT_RUNS = {"num_assistant_tokens_schedule": "dynamic"}


def scripted(vocab_size: int = VOCAB_SIZE, **kwargs: Any) -> ScriptedModel:
    return ScriptedModel.greedy(shift_rule(1, vocab_size), vocab_size, **kwargs)


def raises(error: type[DynaspecError], match: str, *args: Any, **kwargs: Any) -> None:
    """generate(*args, **kwargs) raises `error` with `match` in its message, before decoding."""
    models = [a for a in args if isinstance(a, ScriptedModel)]
    with pytest.raises(error, match=match) as info:
        dynaspec.generate(*args, **kwargs)
    assert isinstance(info.value, DynaspecError)
    assert all(not model.calls for model in models), "a model ran before the error"


# ---------------------------------------------------------------------------------------
# Pairing
# ---------------------------------------------------------------------------------------


def test_vocabulary_mismatch() -> None:
    raises(
        IncompatibleModelsError,
        r"draft vocabulary 12 != target vocabulary 16: "
        r".*share the target.s tokenizer.*tokenizer=.*assistant_tokenizer=.*same model family",
        scripted(16),
        scripted(12),
        PROMPT,
    )


def test_vocabulary_mismatch_between_transformers_models() -> None:
    target = tiny_model("gpt2", vocab_size=64)
    draft = tiny_model("gpt2", vocab_size=48)
    with pytest.raises(IncompatibleModelsError, match="pick a draft from the same model family"):
        dynaspec.generate(target, draft, PROMPT, max_new_tokens=2)


def test_encoder_decoder_paired_with_decoder_only() -> None:
    raises(
        IncompatibleModelsError,
        "target is decoder-only but the draft is encoder-decoder: pair models of the same kind",
        scripted(),
        scripted(is_encoder_decoder=True),
        PROMPT,
    )
    raises(
        IncompatibleModelsError,
        "target is encoder-decoder but the draft is decoder-only",
        scripted(is_encoder_decoder=True),
        scripted(),
        PROMPT,
    )


def test_not_a_model() -> None:
    with pytest.raises(UnsupportedModelError, match="PreTrainedModel or an object implementing"):
        dynaspec.generate("gpt2", None, PROMPT)


# ---------------------------------------------------------------------------------------
# The prompt
# ---------------------------------------------------------------------------------------


def test_empty_prompt() -> None:
    raises(
        InputError,
        r"prompt is empty: give at least one token",
        scripted(),
        scripted(),
        torch.empty((1, 0), dtype=torch.long),
    )


def test_a_batch_of_adapters_that_decode_one_sequence() -> None:
    """Batches (tests/test_batch.py) need transformers models; an adapter of one sequence
    is refused with the way out."""
    raises(
        UnsupportedOptionError,
        r"ScriptedModel decodes one sequence.*call generate\(\) once per prompt",
        scripted(),
        scripted(),
        torch.tensor([[1, 2], [3, 4]]),
    )


@pytest.mark.parametrize(
    "prompt,match",
    [
        ([[1, 2]], r"torch.LongTensor of shape \(1, T\), got list.*return_tensors='pt'"),
        (torch.ones(1, 1, 2, dtype=torch.long), r"must have shape \(1, T\), got \(1, 1, 2\)"),
        (torch.tensor([[1.0, 2.0]]), "integer token ids, got dtype torch.float32"),
    ],
)
def test_malformed_prompt(prompt: Any, match: str) -> None:
    raises(InputError, match, scripted(), None, prompt)


@pytest.mark.parametrize("bad_id", [VOCAB_SIZE, VOCAB_SIZE + 100, -1])
def test_token_id_outside_the_vocabulary(bad_id: int) -> None:
    raises(
        InputError,
        rf"prompt token ids must lie in \[0, {VOCAB_SIZE}\).*another model's tokenizer",
        scripted(),
        scripted(),
        torch.tensor([[1, bad_id, 2]]),
    )


def test_prompt_plus_max_new_tokens_beyond_the_context() -> None:
    raises(
        InputError,
        r"prompt \(3 tokens\) \+ max_new_tokens \(30\) exceeds the model's context of 32 "
        r"tokens: shorten the prompt or lower max_new_tokens to 29",
        scripted(max_length=32),
        scripted(max_length=64),
        PROMPT,
        max_new_tokens=30,
    )


def test_prompt_that_fills_the_context_says_to_shorten_it() -> None:
    """No new token fits: the fix is a shorter prompt, never "max_new_tokens to 0"."""
    with pytest.raises(InputError, match="shorten the prompt to at most 31 tokens") as info:
        dynaspec.generate(scripted(max_length=32), None, torch.ones(1, 32, dtype=torch.long))
    assert "max_new_tokens to" not in str(info.value)
    assert "--max-new-tokens" not in str(info.value)  # Python words in Python
    assert "--max-new-tokens (128)" in info.value.for_cli()  # the flag on the command line


def test_draft_context_counts_too() -> None:
    raises(
        InputError,
        "context of 16 tokens",
        scripted(max_length=64),
        scripted(max_length=16),
        PROMPT,
        max_new_tokens=14,
    )


def test_context_exactly_filled_is_fine() -> None:
    target = scripted(max_length=8)
    out = dynaspec.generate(target, scripted(max_length=8), PROMPT, max_new_tokens=5)
    assert out.sequences.shape == (1, 8)


def test_context_of_a_transformers_model() -> None:
    model = tiny_model("qwen2", vocab_size=32, max_length=16)
    with pytest.raises(InputError, match="context of 16 tokens.*lower max_new_tokens to 13"):
        dynaspec.generate(model, None, PROMPT, max_new_tokens=14)


# ---------------------------------------------------------------------------------------
# Parameters
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_new_tokens", [0, -3])
def test_max_new_tokens_below_one(max_new_tokens: int) -> None:
    raises(
        ConfigError,
        f"max_new_tokens must be >= 1, got {max_new_tokens}",
        scripted(),
        scripted(),
        PROMPT,
        max_new_tokens=max_new_tokens,
    )


@pytest.mark.parametrize("value", [2.5, "8", True])
def test_max_new_tokens_not_an_int(value: Any) -> None:
    raises(
        ConfigError, "max_new_tokens must be an int", scripted(), None, PROMPT, max_new_tokens=value
    )


@pytest.mark.parametrize("threshold", [-0.01, 1.01, float("nan")])
def test_threshold_outside_zero_one(threshold: float) -> None:
    raises(
        ConfigError,
        r"assistant_confidence_threshold must lie in \[0, 1\].*0 turns the confidence stop off",
        scripted(),
        scripted(),
        PROMPT,
        assistant_confidence_threshold=threshold,
    )


@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_threshold_bounds_are_valid(threshold: float) -> None:
    out = dynaspec.generate(
        scripted(), scripted(), PROMPT, max_new_tokens=3, assistant_confidence_threshold=threshold
    )
    assert out.sequences.shape == (1, 6)


@pytest.mark.parametrize("value", [0, -1])
def test_num_assistant_tokens_below_one(value: int) -> None:
    raises(
        ConfigError,
        f"num_assistant_tokens must be >= 1, got {value}; pass draft=None",
        scripted(),
        scripted(),
        PROMPT,
        num_assistant_tokens=value,
    )


def test_num_assistant_tokens_not_an_int() -> None:
    raises(ConfigError, "must be an int", scripted(), scripted(), PROMPT, num_assistant_tokens=2.0)


def test_unknown_schedule() -> None:
    raises(
        ConfigError,
        r"unknown num_assistant_tokens_schedule 'fixed'; choose one of dynamic, heuristic, "
        r"heuristic_transient, constant",
        scripted(),
        scripted(),
        PROMPT,
        num_assistant_tokens_schedule="fixed",
    )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"temperature": 0.0}, "temperature must be > 0 when sampling.*do_sample=False"),
        ({"temperature": -1.0}, "temperature must be > 0"),
        ({"top_k": -1}, "top_k must be >= 0"),
        ({"top_p": 0.0}, r"top_p must lie in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must lie in \(0, 1\]"),
    ],
)
def test_sampling_parameters(kwargs: dict, match: str) -> None:
    raises(ConfigError, match, scripted(), scripted(), PROMPT, do_sample=True, **kwargs)


def test_config_errors_are_value_errors() -> None:
    """Callers that catch ValueError (as for transformers' own checks) still catch ours."""
    with pytest.raises(ValueError):
        dynaspec.generate(scripted(), None, PROMPT, max_new_tokens=0)


# ---------------------------------------------------------------------------------------
# Models that cannot be used
# ---------------------------------------------------------------------------------------


class FrozenCacheModel(torch.nn.Module):
    """A transformers-like model whose cache object has no crop(): it cannot roll back."""

    def __init__(self, vocab_size: int = VOCAB_SIZE) -> None:
        super().__init__()
        self.config = SimpleNamespace(vocab_size=vocab_size, max_position_embeddings=64)
        self.weight = torch.nn.Parameter(torch.zeros(1))

    def forward(
        self, input_ids: torch.Tensor, past_key_values: Any = None, use_cache: bool = True
    ) -> SimpleNamespace:
        logits = torch.zeros(1, input_ids.shape[1], self.config.vocab_size)  # (1, T, V)
        return SimpleNamespace(logits=logits, past_key_values=("key", "value"))


@pytest.mark.parametrize("frozen", ["target", "draft"])
def test_cache_that_cannot_roll_back(frozen: str) -> None:
    models = {"target": scripted(), "draft": scripted()}
    models[frozen] = FrozenCacheModel()
    with pytest.raises(UnsupportedModelError, match=r"cannot be rolled back \(no crop\(\)\).*"):
        dynaspec.generate(models["target"], models["draft"], PROMPT, max_new_tokens=4, **DRAFT_RUNS)


@pytest.mark.parametrize("bad_value", [float("nan"), float("inf")])
@pytest.mark.parametrize("broken", ["target", "draft"])
def test_nan_or_inf_logits(bad_value: float, broken: str) -> None:
    models = {name: tiny_model("llama", vocab_size=32) for name in ("target", "draft")}
    with torch.no_grad():
        models[broken].lm_head.weight[5, 0] = bad_value
    with pytest.raises(NumericalError, match="NaN/inf logits; check the weights and the dtype"):
        dynaspec.generate(models["target"], models["draft"], PROMPT, max_new_tokens=4, **DRAFT_RUNS)
    with pytest.raises(FloatingPointError):  # the builtin family, for callers that catch it
        dynaspec.generate(models[broken], None, PROMPT, max_new_tokens=4)
