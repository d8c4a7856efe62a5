"""A dynaspec server on 127.0.0.1 in a thread of the test process, and plain HTTP calls
(stdlib only), for the serve tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Any

import torch

import dynaspec
from dynaspec.core.config import SpecConfig
from dynaspec.serve.config import ServeConfig
from dynaspec.serve.run import build_app, in_thread


@contextmanager
def running_server(
    target: Any,
    draft: Any,
    tokenizer: Any,
    spec: SpecConfig | None = None,
    prompt_lookup: int | None = None,
    **settings: Any,
):
    """Yields (base_url, app) of a server for "tiny" on a free loopback port."""
    config = ServeConfig(model_name="tiny", port=0, **settings)
    app = build_app(target, draft, tokenizer, config, spec, prompt_lookup)
    with in_thread(app) as url:
        yield url, app


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
