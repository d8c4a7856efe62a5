"""`dynaspec.eval.load` against a tiny fake OpenAI-compatible server (FastAPI + uvicorn).

The server echoes the prompt word by word, so every answer is known in advance (a prompt that
starts with "slow" half a second later). The model name picks its behaviour: "echo" answers,
"fail" returns HTTP 500, "hang" never answers (bounded to a few seconds so nothing outlives
the tests), "hang-stream" sends one chunk and then stalls, "cut" ends its stream without a
finish_reason.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse, StreamingResponse  # noqa: E402

from dynaspec.eval.load import LoadConfig, LoadResult, percentile, run_load, table  # noqa: E402

HANG_S = 8.0  # how long "hang" stalls: longer than any deadline below, short enough to end
SLOW_S = 0.5  # how long a prompt that starts with "slow" waits before its answer
PROMPTS = ("alpha beta", "gamma delta epsilon", "zeta")


def echo_words(prompt: str, max_tokens: int) -> list[str]:
    """The fake model's answer, one 'token' per word."""
    return ["echo:", *prompt.split()][:max_tokens]


def extra_for(words: list[str]) -> dict[str, Any]:
    """The non-standard `dynaspec` field the fake server attaches."""
    return {"accepted_tokens": len(words), "policy": "fake"}


async def stall(request: Request, seconds: float) -> None:
    """Wait `seconds` or until the client goes away, whichever comes first."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not await request.is_disconnected():
        await asyncio.sleep(0.05)


def make_app() -> FastAPI:
    """The fake server: /v1/chat/completions and /v1/completions."""
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        return await answer(request, body, body["messages"][-1]["content"], chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await request.json()
        return await answer(request, body, body["prompt"], chat=False)

    return app


async def answer(request: Request, body: dict[str, Any], prompt: str, chat: bool) -> Any:
    """Dispatch on the model name; see the module docstring."""
    model = body["model"]
    if prompt.startswith("slow"):
        await asyncio.sleep(SLOW_S)
    if model == "fail":
        return JSONResponse({"error": {"message": "boom: the fake model exploded"}}, 500)
    if model == "hang":
        await stall(request, HANG_S)
        return JSONResponse({"error": {"message": "too late"}}, 504)
    words = echo_words(prompt, body.get("max_tokens") or 16)
    if body.get("stream"):
        events = stream_events(request, body, words, chat)
        return StreamingResponse(events, media_type="text/event-stream")
    return whole_response(model, words, chat)


def whole_response(model: str, words: list[str], chat: bool) -> dict[str, Any]:
    """A non-streaming chat.completion or text_completion."""
    text = " ".join(words)
    if chat:
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
    else:
        choice = {"index": 0, "text": text}
    return {
        "id": "fake-1",
        "object": "chat.completion" if chat else "text_completion",
        "created": 0,
        "model": model,
        "choices": [{**choice, "finish_reason": "stop", "logprobs": None}],
        "usage": usage(words),
        "dynaspec": extra_for(words),
    }


def usage(words: list[str]) -> dict[str, int]:
    """An OpenAI `usage` object for an answer of `words`."""
    return {"prompt_tokens": 3, "completion_tokens": len(words), "total_tokens": 3 + len(words)}


def chunk(model: str, chat: bool, piece: str | None, finish: str | None) -> dict[str, Any]:
    """One streaming chunk with one choice."""
    if chat:
        choice = {"index": 0, "delta": {"content": piece} if piece is not None else {}}
    else:
        choice = {"index": 0, "text": piece or ""}
    return {
        "id": "fake-1",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 0,
        "model": model,
        "choices": [{**choice, "finish_reason": finish, "logprobs": None}],
    }


async def stream_events(
    request: Request, body: dict[str, Any], words: list[str], chat: bool
) -> AsyncIterator[str]:
    """SSE lines: a chunk per word, a finish chunk, a usage chunk, then [DONE]."""
    model = body["model"]
    for i, word in enumerate(words):
        yield sse(chunk(model, chat, word if i == 0 else " " + word, None))
        if model == "hang-stream":
            await stall(request, HANG_S)
            return
    if model != "cut":
        yield sse(chunk(model, chat, None, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        last = {**chunk(model, chat, None, None), "choices": [], "usage": usage(words)}
        yield sse({**last, "dynaspec": extra_for(words)})
    yield "data: [DONE]\n\n"


def sse(payload: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"data: {json.dumps(payload)}\n\n"


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """The fake server on 127.0.0.1 and a free port, in a background thread."""
    config = uvicorn.Config(
        make_app(),
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not server.started:
        server.should_exit = True
        pytest.fail("the fake OpenAI server did not start within 10 s")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def config(base_url: str, model: str = "echo", **overrides: Any) -> LoadConfig:
    """A small run: 2 clients x 2 requests unless overridden."""
    fields: dict[str, Any] = {
        "base_url": base_url,
        "model": model,
        "clients": 2,
        "requests_per_client": 2,
        "max_tokens": 16,
        "prompts": PROMPTS,
        "timeout_s": 15,
        "request_timeout_s": 10,
    }
    return LoadConfig(**{**fields, **overrides})


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_every_request_completes_with_text_usage_and_extra(
    base_url: str, chat: bool, stream: bool
) -> None:
    cfg = config(base_url, chat=chat, stream=stream)
    result = run_load(cfg)

    assert (result.completed, result.failed, result.lost) == (4, 0, 0)
    assert len(result.results) == 4
    for r in result.results:
        words = echo_words(cfg.prompt_for(r.client, r.index), cfg.max_tokens)
        assert r.ok and r.error is None
        assert r.prompt == PROMPTS[(r.client * 2 + r.index) % len(PROMPTS)]
        assert r.text == " ".join(words)
        assert r.completion_tokens == len(words)
        assert r.finish_reason == "stop"
        assert r.extra == extra_for(words)
        assert r.ttft_s is not None and r.latency_s is not None
        assert 0 < r.ttft_s <= r.latency_s
    total_tokens = sum(len(echo_words(cfg.prompt_for(c, j), 16)) for c in (0, 1) for j in (0, 1))
    assert result.completion_tokens == total_tokens
    assert result.tokens_per_s_total == pytest.approx(total_tokens / result.wall_s)
    assert result.tokens_per_s_per_client is not None and result.tokens_per_s_per_client > 0
    assert result.ttft_p50 is not None and result.ttft_p95 is not None
    assert result.ttft_p50 <= result.ttft_p95
    summary = result.summary()
    assert json.loads(json.dumps(summary)) == summary
    assert summary["completed"] == 4 and summary["lost"] == 0


@pytest.mark.parametrize("model,stream", [("hang", False), ("hang-stream", True)])
def test_a_hanging_server_ends_at_the_deadline_with_requests_lost(
    base_url: str, model: str, stream: bool
) -> None:
    start = time.perf_counter()
    result = run_load(config(base_url, model, stream=stream, timeout_s=2))
    elapsed = time.perf_counter() - start

    assert elapsed < 5
    assert result.wall_s == pytest.approx(2, abs=0.5)
    assert (result.completed, result.failed, result.lost) == (0, 0, 4)
    assert all(r.lost and not r.ok and "deadline" in (r.error or "") for r in result.results)
    assert result.ttft_p50 is None and result.tokens_per_s_total is None
    assert "| 2 | 0/0/4 | - | - | - | - |" in table([result])


def test_a_per_request_timeout_counts_as_lost(base_url: str) -> None:
    cfg = config(base_url, "hang", clients=1, stream=False, request_timeout_s=0.5)
    start = time.perf_counter()
    result = run_load(cfg)

    assert time.perf_counter() - start < 4
    assert (result.completed, result.failed, result.lost) == (0, 0, 2)
    assert all("timeout" in (r.error or "").lower() for r in result.results)


def test_a_stream_without_a_finish_reason_counts_as_lost(base_url: str) -> None:
    result = run_load(config(base_url, "cut", stream=True))

    assert (result.completed, result.failed, result.lost) == (0, 0, 4)
    first = result.results[0]
    assert "finish_reason" in (first.error or "")
    assert first.text == " ".join(echo_words(first.prompt, 16))  # what did arrive is kept


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
def test_a_server_error_counts_as_failed_with_its_text(base_url: str, chat: bool) -> None:
    result = run_load(config(base_url, "fail", chat=chat))

    assert (result.completed, result.failed, result.lost) == (0, 4, 0)
    for r in result.results:
        assert not r.ok and not r.lost
        assert "500" in (r.error or "") and "boom" in (r.error or "")


def test_an_unreachable_server_counts_as_failed() -> None:
    with socket.socket() as s:  # a port nobody listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = run_load(config(f"http://127.0.0.1:{port}/v1", clients=1, timeout_s=10))

    assert (result.completed, result.failed, result.lost) == (0, 2, 0)
    assert all("Connection" in (r.error or "") for r in result.results)


def test_table_has_one_line_per_run(base_url: str) -> None:
    runs: list[LoadResult] = [
        run_load(config(base_url, clients=n, requests_per_client=1)) for n in (1, 3)
    ]
    lines = table(runs).splitlines()

    assert len(lines) == 2 + len(runs)  # header, alignment row, one line per run
    assert "clients" in lines[0] and "TTFT p50" in lines[0] and "tok/s total" in lines[0]
    assert lines[2].startswith("| 1 | 1/0/0 |")
    assert lines[3].startswith("| 3 | 3/0/0 |")


def test_percentile_is_nearest_rank() -> None:
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == 5.0
    assert percentile(values, 0) == 1.0
    assert percentile(list(range(1, 21)), 95) == 19
    assert percentile([], 50) is None


def test_config_rejects_an_empty_run() -> None:
    with pytest.raises(ValueError, match="prompt"):
        LoadConfig("http://127.0.0.1:1/v1", "m", 1, 1, 8, prompts=())
    with pytest.raises(ValueError, match="clients"):
        LoadConfig("http://127.0.0.1:1/v1", "m", 0, 1, 8, prompts=("x",))


@pytest.mark.parametrize("waits", [True, False], ids=["waits", "free"])
def test_a_request_waits_for_another_clients_request_to_end(base_url: str, waits: bool) -> None:
    """Client 0's second request waits for client 1's first, a slow one (`LoadConfig.waits`):
    it is sent only once that one has ended; without the wait it goes before (the check can
    fail). Every request records when it was sent."""
    prompts = ("a", "b", "slow c", "d")  # client 0: a, b; client 1: slow c, d
    result = run_load(config(base_url, prompts=prompts, waits=(((0, 1), (1, 0)),) if waits else ()))

    assert (result.completed, result.failed, result.lost) == (4, 0, 0)
    by = {(r.client, r.index): r for r in result.results}
    slow, waiting = by[1, 0], by[0, 1]
    assert slow.prompt == "slow c" and waiting.prompt == "b"
    assert all(r.sent_s is not None and 0 <= r.sent_s <= result.wall_s for r in result.results)
    assert slow.sent_s is not None and slow.latency_s is not None and waiting.sent_s is not None
    slow_ended = slow.sent_s + slow.latency_s
    assert (waiting.sent_s >= slow_ended) == waits
    assert by[0, 0].sent_s is not None and by[0, 0].sent_s < slow_ended  # the others never wait


def test_config_rejects_a_wait_that_could_deadlock() -> None:
    """A wait names requests of the run, the one waited for at a smaller index."""
    fields = dict(base_url="http://127.0.0.1:1/v1", model="m", max_tokens=8, prompts=("x",))
    LoadConfig(clients=2, requests_per_client=2, waits=(((0, 1), (1, 0)),), **fields)
    for wait in (((0, 1), (1, 1)), ((0, 0), (1, 0)), ((0, 1), (2, 0)), ((0, 2), (1, 0))):
        with pytest.raises(ValueError, match="cannot wait"):
            LoadConfig(clients=2, requests_per_client=2, waits=(wait,), **fields)
