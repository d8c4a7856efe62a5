"""One Request per sequence, built in one place (dynaspec/request.py) for generate, a batch,
ContinuousBatch and the vLLM proposers: the same keywords make the same processors, limits
and sampling wherever they enter, and bad arguments are typed errors."""

from __future__ import annotations

import pytest
import torch
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.request import Request
from dynaspec.errors import ConfigError, InputError
from dynaspec.request import CallOptions, make_request, resolve_call, sequence_request

KEYWORDS = {
    "max_new_tokens": 6,
    "do_sample": True,
    "temperature": 0.7,
    "top_k": 5,
    "repetition_penalty": 1.2,
}


@pytest.fixture(scope="module")
def pair() -> tuple[object, object]:
    target = tiny_model("llama")
    return target, noisy_copy(target, scale=0.1)


def test_generate_a_batch_row_and_a_server_row_get_the_same_request(pair) -> None:
    target, draft = pair
    prompt = torch.tensor([[5, 6, 7, 8]])
    options = CallOptions(seed=3, keywords=KEYWORDS)
    alone, models = sequence_request(target, draft, prompt, None, options, 0.0)
    call = resolve_call(target, options, prompt.shape[1], models.target.vocab_size, 0.0)
    row = make_request(call, prompt, row=0, rows=2)
    served = ContinuousBatch(target, draft).make_request([5, 6, 7, 8], dict(KEYWORDS, seed=3))
    for request in (alone, row, served):
        assert isinstance(request, Request)
        assert request.processor_names == alone.processor_names
        assert request.limits == alone.limits
        assert request.sampler.config == alone.sampler.config
    assert "RepetitionPenalty" in alone.processor_names and "TopK" in alone.processor_names
    assert alone.drafter is not None and alone.policy is not None  # alone: its own
    assert row.drafter is None and row.policy is None  # a batch row: the batch's


def test_a_batch_row_after_the_first_samples_with_its_own_seed(pair) -> None:
    target, _ = pair
    prompt = torch.tensor([[5, 6, 7, 8]])
    call = resolve_call(target, CallOptions(seed=3, keywords=KEYWORDS), 4, 0, 0.0)
    seeds = [make_request(call, prompt, row=i, rows=3).sampler.config.seed for i in range(3)]
    assert seeds[0] == 3 and len(set(seeds)) == 3


def test_the_request_is_what_generate_decodes(pair) -> None:
    target, draft = pair
    prompt = torch.tensor([[5, 6, 7, 8]])
    output = dynaspec.generate(target, draft, prompt, seed=3, **KEYWORDS)
    request, _ = sequence_request(
        target, draft, prompt, None, CallOptions(seed=3, keywords=KEYWORDS), 0.0
    )
    assert output.stats.processors == request.processor_names
    assert output.sequences.shape[1] <= prompt.shape[1] + request.limits.max_new_tokens


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (lambda: CallOptions(seed="3"), ConfigError),
        (lambda: CallOptions(keywords={"max_new_tokenz": 3}), ConfigError),
        (lambda: CallOptions(max_matching_ngram_size=3).lookup(), ConfigError),
    ],
)
def test_bad_options_are_typed_errors(pair, options, error) -> None:
    target, draft = pair
    with pytest.raises(error):
        made = options()
        if isinstance(made, CallOptions):
            sequence_request(target, draft, torch.tensor([[5, 6]]), None, made, 0.0)


def test_a_bad_prompt_is_an_input_error_before_any_model_runs(pair) -> None:
    target, draft = pair
    with pytest.raises(InputError):
        sequence_request(
            target, draft, torch.tensor([[]], dtype=torch.long), None, CallOptions(), 0.0
        )
    with pytest.raises(InputError):
        ContinuousBatch(target, draft).make_request([], {})
