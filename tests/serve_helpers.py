"""A dynaspec server on 127.0.0.1 in a thread of the test process, a test module's fixtures
of one, and plain HTTP calls (stdlib only) or the official openai client, for the serve
tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Any

import pytest
import torch

import dynaspec
from dynaspec.core.config import SpecConfig
from dynaspec.models.tiny import tiny_pair
from dynaspec.serve.config import ServeConfig
from dynaspec.serve.run import build_app, in_thread


@contextmanager
def running_server(
    target: Any,
    draft: Any,
    tokenizer: Any,
    spec: SpecConfig | None = None,
    prompt_lookup: int | None = None,
    draft_tokenizer: Any = None,
    **settings: Any,
):
    """Yields (base_url, app) of a server for "tiny" on a free loopback port (`settings`:
    ServeConfig's; `draft_tokenizer`: a draft of another vocabulary's own)."""
    config = ServeConfig(model_name="tiny", port=0, **settings)
    app = build_app(
        target, draft, tokenizer, config, spec, prompt_lookup, draft_tokenizer=draft_tokenizer
    )
    with in_thread(app) as url:
        yield url, app


def serve_fixtures(**settings: Any) -> tuple[Any, Any]:
    """A test module's module-scoped fixtures `models` (the tiny pair: target, draft,
    tokenizer) and `server` ((url, app) of `running_server` over them with `settings`), to
    be bound to those names: `models, server = serve_fixtures(max_batch=2)`."""

    @pytest.fixture(scope="module")
    def models() -> tuple[Any, Any, Any]:
        return tiny_pair()

    @pytest.fixture(scope="module")
    def server(models: tuple[Any, Any, Any]):
        with running_server(*models, **settings) as running:
            yield running

    return models, server


def client(url: str, key: str = "none", timeout: float = 60) -> Any:
    """The official openai client of the server at `url` (no retries)."""
    import openai

    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=timeout)


def call(
    url: str,
    path: str,
    body: Any = None,
    *,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
    method: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; a JSON `body` or `raw` bytes."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url + path,
        data=data,
        method=method or ("POST" if data is not None else "GET"),
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def alone_text(target: Any, draft: Any, tokenizer: Any, prompt: str, new: int, **kwargs) -> str:
    """generate() of one prompt alone, decoded as the server decodes."""
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    out = dynaspec.generate(target, draft, ids, max_new_tokens=new, **kwargs)
    return tokenizer.decode(out.sequences[0, ids.shape[1] :], skip_special_tokens=True)
