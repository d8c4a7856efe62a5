"""What clients get wrong, and clients that go away: every error is an HTTP error in OpenAI's
shape with the fix in its message (never a 500, never a dead server); a client that drops a
stream frees its row at the next round and the batch's cache returns to its size; a full
queue answers 429 with Retry-After; the API key guards every endpoint but /health; SIGTERM
lets running requests finish."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_helpers import call, running_server, serve_fixtures  # noqa: E402

CHAT = "/v1/chat/completions"


models, server = serve_fixtures(max_batch=2, max_body_bytes=4096)


def ask(text: str = "def f(x):", **fields) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], **fields}


def error_of(status: int, body: bytes) -> dict:
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert status not in (422, 500)
    return error


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        (json.dumps({"model": "tiny"}).encode(), 400, "messages"),
        (json.dumps(ask(max_tokens=0)).encode(), 400, "max_tokens"),
        (json.dumps(ask(max_tokens=2045)).encode(), 400, "at most"),
        (json.dumps(ask(text="y" * 2100, max_tokens=5)).encode(), 400, "context"),
        (json.dumps(ask(n=2)).encode(), 400, "n must be 1"),
        (json.dumps(ask(logprobs=True)).encode(), 400, "logprobs"),
        (json.dumps(ask(temperature=5)).encode(), 400, "temperature"),
        (json.dumps(ask(stop=[""])).encode(), 400, "empty stop"),
        (json.dumps({**ask(), "model": "gpt-4"}).encode(), 404, "serves 'tiny'"),
        (b"x" * 5000, 413, "larger than 4096 bytes"),
    ],
)
def test_bad_requests_get_openai_errors(server, body: bytes, status: int, words: str) -> None:
    url, _ = server
    got, _, answer = call(url, CHAT, raw=body)
    assert got == status, answer
    assert words in error_of(got, answer)["message"]


def test_a_chunked_body_over_the_limit_is_refused_as_it_arrives(server) -> None:
    url, _ = server
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    pieces = (b'{"model": "tiny", "messages": [' + b" " * 1000 for _ in range(8))
    connection.request(
        "POST", CHAT, pieces, {"Content-Type": "application/json"}, encode_chunked=True
    )
    response = connection.getresponse()
    assert response.status == 413
    assert "larger than 4096 bytes" in error_of(413, response.read())["message"]
    connection.close()


def test_the_server_still_answers_after_errors(server) -> None:
    url, _ = server
    call(url, CHAT, raw=b"\xff\xfe garbage")
    status, _, body = call(url, CHAT, ask(max_tokens=3))
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 3


def test_a_client_that_drops_its_stream_frees_its_row(server) -> None:
    url, app = server
    engine = app.state.engine
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    payload = json.dumps(ask(max_tokens=1500, stream=True))
    connection.request("POST", CHAT, payload, {"Content-Type": "application/json"})
    response = connection.getresponse()
    assert response.status == 200
    response.fp.readline()  # the first event
    deadline = time.monotonic() + 30
    while not engine.jobs and time.monotonic() < deadline:  # its row is in the batch
        time.sleep(0.01)
    assert engine.jobs
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    deadline = time.monotonic() + 30
    while engine.jobs and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not engine.jobs, "the dropped request's row stayed in the batch"
    assert engine.batch.target.cache is None and engine.batch.target.mask.shape == (0, 0)
    status, _, _ = call(url, CHAT, ask(max_tokens=3))
    assert status == 200


def test_a_full_queue_answers_429_with_retry_after(models) -> None:
    with running_server(*models, max_batch=1, max_queue=0) as (url, app):
        results = []
        worker = threading.Thread(
            target=lambda: results.append(call(url, CHAT, ask(max_tokens=1500)))
        )
        worker.start()
        deadline = time.monotonic() + 30
        while not app.state.engine.jobs and time.monotonic() < deadline:
            time.sleep(0.01)
        status, headers, body = call(url, CHAT, ask(max_tokens=3))
        worker.join(120)
    assert status == 429 and int(headers["retry-after"]) >= 1
    assert "retry after" in error_of(status, body)["message"]
    assert results[0][0] == 200


def test_the_api_key_guards_everything_but_health(models) -> None:
    with running_server(*models, api_key="s3cret") as (url, _):
        assert call(url, "/health")[0] == 200
        for path, body in (("/v1/models", None), ("/metrics", None), (CHAT, ask(max_tokens=2))):
            status, _, answer = call(url, path, body)
            assert status == 401 and "--api-key" in error_of(status, answer)["message"]
            wrong = call(url, path, body, headers={"Authorization": "Bearer nope"})[0]
            assert wrong == 401
            good = call(url, path, body, headers={"Authorization": "Bearer s3cret"})[0]
            assert good == 200


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_sigterm_drains_running_requests_and_stops(tmp_path: Path) -> None:
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "dynaspec", "serve", "--pair", "tiny", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if call(url, "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        results = []
        request = threading.Thread(
            target=lambda: results.append(call(url, CHAT, ask(max_tokens=1000)))
        )
        request.start()
        time.sleep(0.5)  # the request is running
        server.send_signal(signal.SIGTERM)
        request.join(120)
        assert server.wait(60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    finally:
        if server.poll() is None:
            server.kill()
    assert "requests drained, engine stopped" in (tmp_path / "server.log").read_text()
    status, _, body = results[0]
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 1000
