"""Arguments a user plausibly gets wrong end in a typed error that names the fix, and
transformers' keywords keep transformers' meaning at their edges (issue 24, items 6, 7, 10)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from tiny_models import hf_greedy, tiny_model

import dynaspec
from dynaspec.errors import ConfigError, InputError

VOCAB = 64
PROMPT = torch.tensor([[1, 2, 3]])


@pytest.fixture(scope="module")
def target() -> Any:
    return tiny_model("llama", vocab_size=VOCAB)


@pytest.mark.parametrize(
    "arguments,error,match",
    [
        ({"policy": "adaptive"}, ConfigError, "num_assistant_tokens_schedule='adaptive'"),
        ({"policy": 3}, ConfigError, r"AdaptivePolicy\(\)"),
        ({"seed": "x"}, ConfigError, "seed must be an int"),
        ({"seed": 1.5, "do_sample": True}, ConfigError, "seed must be an int"),
        ({"eos_token_id": "a"}, ConfigError, "tokenizer.eos_token_id"),
        ({"eos_token_id": [2, "b"]}, ConfigError, "list of token ids"),
        ({"streamer": object()}, ConfigError, r"put\(tokens\) and end\(\)"),
    ],
)
def test_arguments_of_the_wrong_kind_are_typed_errors(
    target: Any, arguments: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        dynaspec.generate(target, target, PROMPT, max_new_tokens=3, **arguments)


def test_input_ids_on_the_meta_device_are_an_input_error(target: Any) -> None:
    with pytest.raises(InputError, match="meta device"):
        dynaspec.generate(target, None, PROMPT.to("meta"), max_new_tokens=3)


def test_eos_token_id_takes_any_integer_type(target: Any) -> None:
    reference = hf_greedy(target, PROMPT, 8)
    eos = int(reference[0, 5])
    out = dynaspec.generate(target, None, PROMPT, max_new_tokens=8, eos_token_id=torch.tensor(eos))
    assert torch.equal(out.sequences, hf_greedy(target, PROMPT, 8, eos_token_id=eos))


def test_max_time_zero_emits_one_token_as_transformers(target: Any) -> None:
    out = dynaspec.generate(target, target, PROMPT, max_new_tokens=10, max_time=0.0)
    reference = target.generate(PROMPT, max_new_tokens=10, max_time=0.0, do_sample=False)
    assert out.sequences.shape[1] == reference.shape[1] == PROMPT.shape[1] + 1
    assert torch.equal(out.sequences, reference)
    with pytest.raises(ConfigError, match="max_time must be >= 0"):
        dynaspec.generate(target, None, PROMPT, max_new_tokens=3, max_time=-1.0)


def test_min_new_tokens_above_max_new_tokens_warns_as_transformers(target: Any) -> None:
    with pytest.warns(
        UserWarning, match="Unfeasible length constraints: `min_new_tokens` \\(10\\)"
    ):
        out = dynaspec.generate(target, None, PROMPT, max_new_tokens=3, min_new_tokens=10)
    assert out.sequences.shape[1] == PROMPT.shape[1] + 3  # stops at the maximum, as there
    with pytest.warns(UserWarning, match="`min_length` \\(20\\)"):
        dynaspec.generate(target, None, PROMPT, max_new_tokens=3, min_length=20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dynaspec.generate(target, None, PROMPT, max_new_tokens=3, min_new_tokens=3)


def test_outputs_are_ordinary_tensors_the_caller_can_edit_and_backpropagate(target: Any) -> None:
    out = dynaspec.generate(
        target, target, PROMPT, max_new_tokens=4, output_scores=True, output_logits=True
    )
    assert not out.sequences.is_inference()
    assert not any(row.is_inference() for row in out.scores + out.logits)
    out.sequences[0, -1] = 0  # in place, as on transformers' output
    out.scores[0].zero_()
    embedding = torch.nn.Embedding(VOCAB, 4)
    loss = embedding(out.sequences).sum() + (out.logits[0] * 1.0).sum()
    loss.backward()
    assert embedding.weight.grad is not None
