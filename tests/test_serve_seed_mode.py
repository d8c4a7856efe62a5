"""`seed_mode`, a request's choice of what its `seed` means: "keyed" (the default) gives the
target alone's text for the seed whatever drafts it; "stream" samples from a seeded stream
verified by rejection sampling, generate(seed_mode="stream")'s text; anything else is a 400."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_helpers import alone_text, call, serve_fixtures  # noqa: E402

from dynaspec.core.config import SpecConfig  # noqa: E402

PROMPT = "def fib(n):"
NEW = 24
SAMPLING = {"do_sample": True, "temperature": 0.8, "top_p": 0.9, "seed": 11}
SCHEDULE = {"num_assistant_tokens_schedule": "constant", "num_assistant_tokens": 4}


models, server = serve_fixtures(spec=SpecConfig(**SCHEDULE))


@pytest.fixture(scope="module")
def url(server) -> str:
    return server[0]


def complete(url: str, **fields) -> tuple[int, dict]:
    body = {"model": "tiny", "prompt": PROMPT, "max_tokens": NEW, "temperature": 0.8}
    status, _, answer = call(url, "/v1/completions", {**body, "top_p": 0.9, **fields})
    return status, json.loads(answer)


def test_keyed_is_the_default_and_the_target_alones_text(url, models) -> None:
    target, _, tokenizer = models
    expected = alone_text(target, None, tokenizer, PROMPT, NEW, **SAMPLING)
    texts = [
        complete(url, seed=11, **mode)[1]["choices"][0]["text"]
        for mode in ({}, {"seed_mode": "keyed"}, {"seed_mode": "keyed"})
    ]
    assert texts == [expected] * 3


def test_stream_is_generates_stream_seed(url, models) -> None:
    target, draft, tokenizer = models
    expected = alone_text(
        target, draft, tokenizer, PROMPT, NEW, **SAMPLING, seed_mode="stream", **SCHEDULE
    )
    keyed = alone_text(target, None, tokenizer, PROMPT, NEW, **SAMPLING)
    status, answer = complete(url, seed=11, seed_mode="stream")
    assert status == 200 and answer["choices"][0]["text"] == expected != keyed
    assert complete(url, seed=11, seed_mode="stream")[1]["choices"][0]["text"] == expected


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"seed": 11, "seed_mode": "gumbel"}, "'keyed' or 'stream'"),
        ({"seed": 11, "seed_mode": 1}, "'keyed' or 'stream'"),
        ({"seed_mode": "stream"}, "send a seed with it"),
    ],
)
def test_a_bad_seed_mode_is_a_400_that_names_it(url, fields, words) -> None:
    status, answer = complete(url, **fields)
    assert status == 400
    assert answer["error"]["param"] == "seed_mode" and words in answer["error"]["message"]
