"""The HTTP layer: FastAPI routes in OpenAI's shapes over the engine thread.

A handler checks the request (shape, model name, limits), renders the prompt (the chat
template for chat requests), makes the request's row (generate()'s checks of its settings)
and hands a `Job` to the engine; the engine's events come back through an asyncio queue and
are sent as one JSON response or as server-sent events (`data: {chunk}` lines, then
`data: [DONE]`). Every error is OpenAI's error shape with a status that says whose fault it
is; nothing a client sends makes a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from dynaspec.errors import DynaspecError
from dynaspec.serve import protocol
from dynaspec.serve.config import ServeConfig
from dynaspec.serve.engine import Delta, Engine, Event, Failed, Finished, Job, QueueFull
from dynaspec.serve.limits import BodyLimit
from dynaspec.serve.prompts import Prompter
from dynaspec.serve.sources import scope_of
from dynaspec.serve.text import TextStream

OPEN = ("/health",)  # the only path served without the API key
ENDPOINTS = {  # path -> the `endpoint` label of dynaspec_requests_total
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/models": "models",
    "/health": "health",
    "/metrics": "metrics",
}


def create_app(engine: Engine, prompter: Prompter, config: ServeConfig) -> FastAPI:
    """The server's ASGI app over `engine`, which the caller starts and stops (serve/run.py
    does it in the app's lifespan)."""
    app = FastAPI(title="dynaspec serve", docs_url=None, redoc_url=None)
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    app.state.engine, app.state.prompter, app.state.config = engine, prompter, config
    _errors(app)

    @app.middleware("http")
    async def authenticate_and_count(request: Request, call_next: Any) -> Response:
        response = await _authenticated(request, call_next, config)
        label = ENDPOINTS.get(request.url.path, "other")
        engine.metrics.requests.labels(label, str(response.status_code)).inc()
        return response

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "batch": len(engine.jobs), "queue": len(engine.queue)}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": config.model_name, "object": "model", "created": 0, "owned_by": "dynaspec"}
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(engine.metrics.text(), media_type="text/plain; version=0.0.4")

    @app.post("/v1/chat/completions")
    async def chat(body: protocol.ChatRequest, request: Request) -> Response:
        return await _complete(request, body, chat=True)

    @app.post("/v1/completions")
    async def completions(body: protocol.CompletionRequest, request: Request) -> Response:
        return await _complete(request, body, chat=False)

    return app


async def _authenticated(request: Request, call_next: Any, config: ServeConfig) -> Response:
    """The route's response, or 401 when the API key is set and not given."""
    if config.api_key and request.url.path not in OPEN:
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {config.api_key}".encode()):
            error = protocol.ServeError(
                401,
                "invalid or missing API key: send the key given to --api-key as "
                "'Authorization: Bearer KEY' (the openai client's api_key=)",
                kind="authentication_error",
                code="invalid_api_key",
            )
            return _error_response(error)
    return await call_next(request)


async def _complete(request: Request, body: Any, chat: bool) -> Response:
    """Checks, submits and answers one request (streamed or whole)."""
    state = request.app.state
    engine, config, prompter = state.engine, state.config, state.prompter
    try:
        job, events = _job(body, chat, engine, config, prompter)
        job.scope = scope_of(config.suffix_scope, request.headers.get("authorization"), body.user)
        if body.draft_sources is not None:
            job.sources = frozenset(body.draft_sources)
        engine.submit(job)
    except QueueFull as full:
        raise protocol.ServeError(
            429,
            f"the server is busy ({config.max_batch} requests running, {config.max_queue} "
            f"waiting): retry after {full.retry_after} s",
            kind="rate_limit_error",
            code="queue_full",
            headers={"Retry-After": str(full.retry_after)},
        ) from None
    ident = protocol.new_id(chat)
    if body.stream:
        stream = _stream(request, job, events, ident, body, chat)
        return StreamingResponse(stream, media_type="text/event-stream")
    text, finished = await _collect(request, job, events)
    used = protocol.usage(finished.prompt_tokens, finished.completion_tokens)
    answer = protocol.response(
        ident, config.model_name, chat, text, finished.reason, used, finished.stats
    )
    if body.return_token_ids:
        protocol.with_token_ids(answer, job.prompt, finished.token_ids)
    return JSONResponse(answer)


def _job(
    body: Any, chat: bool, engine: Engine, config: ServeConfig, prompter: Prompter
) -> tuple[Job, asyncio.Queue[Event]]:
    """The request's job for the engine, and the queue its events arrive on."""
    if body.model != config.model_name:
        raise protocol.ServeError(
            404,
            f"the model {body.model!r} does not exist here: this server serves "
            f"{config.model_name!r} (GET /v1/models)",
            kind="invalid_request_error",
            param="model",
            code="model_not_found",
        )
    body.refuse_unsupported()
    prompt = prompter.chat(body.messages) if chat else prompter.completion(body.text())
    new = config.max_new_tokens(len(prompt), body.wanted_tokens(), engine.batch.max_length)
    try:
        row = engine.batch.make_row(prompt, body.generation_keywords(new))
        engine.batch.check_sources(body.draft_sources)
    except DynaspecError as error:
        raise protocol.ServeError(400, str(error)) from None
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[Event] = asyncio.Queue()

    def emit(event: Event) -> None:
        with contextlib.suppress(RuntimeError):  # a closed event loop: nobody is listening
            loop.call_soon_threadsafe(events.put_nowait, event)

    return Job(prompt, row, TextStream(prompter.tokenizer, body.stops()), emit), events


async def _next(request: Request, job: Job, events: asyncio.Queue[Event]) -> Event | None:
    """The job's next event; None (and the job cancelled) when the client went away.
    (A stream learns of that from Starlette, which cancels it: see `_stream`.)"""
    while True:
        try:
            return await asyncio.wait_for(events.get(), timeout=1.0)
        except asyncio.TimeoutError:
            if await request.is_disconnected():
                job.cancel()
                return None


async def _collect(
    request: Request, job: Job, events: asyncio.Queue[Event]
) -> tuple[str, Finished]:
    parts = []
    while True:
        event = await _next(request, job, events)
        if event is None:
            raise protocol.ServeError(499, "the client closed the request")
        if isinstance(event, Failed):
            raise protocol.ServeError(503, event.message, kind="server_error")
        if isinstance(event, Finished):
            return "".join(parts), event
        parts.append(event.text)


async def _stream(
    request: Request,
    job: Job,
    events: asyncio.Queue[Event],
    ident: str,
    body: Any,
    chat: bool,
) -> AsyncIterator[str]:
    """Server-sent events: a role chunk (chat), text chunks, the closing chunk (and a
    usage chunk when stream_options.include_usage), then [DONE]."""
    model = request.app.state.config.model_name
    try:
        if chat:
            yield _sse(protocol.chunk(ident, model, chat, {"role": "assistant", "content": ""}))
        while True:
            event = await events.get()
            if isinstance(event, Failed):
                yield _sse(protocol.ServeError(503, event.message, kind="server_error").body())
                return
            if isinstance(event, Delta):
                yield _sse(protocol.chunk(ident, model, chat, {"content": event.text}))
                continue
            extra = {"dynaspec": event.stats}
            closing = protocol.chunk(ident, model, chat, None, event.reason, extra)
            if body.return_token_ids:
                protocol.with_token_ids(closing, job.prompt, event.token_ids)
            yield _sse(closing)
            if body.stream_options is not None and body.stream_options.include_usage:
                used = protocol.usage(event.prompt_tokens, event.completion_tokens)
                closing = protocol.chunk(ident, model, chat)
                closing.update(choices=[], usage=used)
                yield _sse(closing)
            yield "data: [DONE]\n\n"
            return
    finally:
        job.cancel()  # a client that went away mid-stream: its row leaves at the next round


def _sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


def _error_response(error: protocol.ServeError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def _errors(app: FastAPI) -> None:
    """OpenAI's error shape for every error, 400 (not FastAPI's 422) for a bad request."""

    @app.exception_handler(protocol.ServeError)
    async def serve_error(request: Request, error: protocol.ServeError) -> JSONResponse:
        return _error_response(error)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        message = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            message = "the body is not valid JSON: send a JSON object"
        elif where:
            message = f"{where}: {message}"
        return _error_response(protocol.ServeError(400, message, param=where or None))
