"""`dynaspec serve` with a draft of another tokenizer and with a sliding-window target: two
requests at once, streamed and not, each greedy completion equal to the target alone's
(fp32 tiny models); the token ids are compared (`return_token_ids`)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

import torch  # noqa: E402
from serve_helpers import client, running_server  # noqa: E402
from test_batch_features import cross_pair  # noqa: E402, F401
from test_sliding_window import window_model  # noqa: E402

import dynaspec  # noqa: E402
from dynaspec.core.config import SpecConfig  # noqa: E402
from dynaspec.models.tiny import byte_tokenizer  # noqa: E402

NEW = 16
PROMPTS = [[50, 51, 52, 53, 54, 55, 56, 57], [40, 41, 42]]  # token ids (bytes "2345..", "()*")


def completions(url: str, stream: bool) -> list[list[int]]:
    """Both prompts at once; each completion's token ids."""
    server = client(url, timeout=120)

    def one(prompt: list[int]) -> list[int]:
        extra = {"return_token_ids": True}
        reply = server.completions.create(
            model="tiny", prompt=prompt, max_tokens=NEW, stream=stream, extra_body=extra
        )
        if not stream:
            return reply.choices[0].model_extra["token_ids"]
        chunks = [chunk for chunk in reply if chunk.choices]
        return chunks[-1].choices[0].model_extra["token_ids"]

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, PROMPTS))


def alone(target: Any) -> list[list[int]]:
    outs = [dynaspec.generate(target, None, torch.tensor([p]), max_new_tokens=NEW) for p in PROMPTS]
    return [out.sequences[0, len(p) :].tolist() for out, p in zip(outs, PROMPTS, strict=True)]


def serve_both_ways(target: Any, draft: Any, tokenizer: Any, spec: SpecConfig, **app: Any) -> None:
    """A server of two rows (`app`: running_server's options) answers both prompts at once as
    the target alone, streamed and not."""
    expected = alone(target)
    with running_server(target, draft, tokenizer, spec, max_batch=2, **app) as (url, _):
        assert completions(url, stream=False) == expected
        assert completions(url, stream=True) == expected


def test_a_draft_with_another_tokenizer_serves_each_request_as_alone(cross_pair) -> None:  # noqa: F811
    target, draft, tokenizers = cross_pair
    spec = SpecConfig(num_assistant_tokens=5, num_assistant_tokens_schedule="constant")
    own = tokenizers["assistant_tokenizer"]
    serve_both_ways(target, draft, tokenizers["tokenizer"], spec, draft_tokenizer=own)


def test_a_sliding_window_target_serves_each_request_as_alone() -> None:
    target, draft = window_model("gemma2"), window_model("gemma2", seed=1)
    serve_both_ways(target, draft, byte_tokenizer(), SpecConfig())
