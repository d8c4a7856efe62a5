"""A bounded load test for any OpenAI-compatible endpoint (`dynaspec serve`, vLLM, llama.cpp).

`run_load(LoadConfig(...))` starts `clients` concurrent clients; each sends
`requests_per_client` requests one after another through the official `openai` package and
records time to first token, latency, completion tokens (from `usage`) and the server's
non-standard `dynaspec` field. The whole run has one deadline (`timeout_s`), so a CI smoke test
or a benchmark never hangs on a stuck server: at the deadline every client is cancelled and
whatever was not answered counts as lost.

Each request ends in exactly one of three states, so completed + failed + lost always equals
clients * requests_per_client:

- completed: an answer came (for a stream: a chunk with a finish_reason, or the stream's end
  after one);
- failed: the server refused it (an HTTP error status) or could not be reached;
- lost: no answer before the run deadline or the per-request timeout, or a stream that broke
  off (ended or errored) before any finish_reason.

A request may wait for another client's request to end before it is sent
(`LoadConfig.waits`: a retry sent once the first attempt has ended, eval/agent.py); the time a
client waits counts in the run's wall time, not in its requests' latencies.

`table(results)` renders one markdown line per run, e.g. one run per client count.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import Any

import openai
from openai import AsyncOpenAI

_CANCEL_GRACE_S = 2.0  # how long cancelled clients and the HTTP pool get to wind down


@dataclass(frozen=True)
class LoadConfig:
    """What to send, how many clients, and the limits of the run.

    Client c's j-th request uses `prompts[(c * requests_per_client + j) % len(prompts)]`.
    `timeout_s` is a deadline for the whole run; `request_timeout_s` is the openai client's
    per-request timeout (for a stream it bounds each wait for the next bytes, not the whole
    stream). `waits`: ((client, index), (other client, earlier index)) pairs, the first
    request sent only once the second has ended (completed, failed or lost); the second's
    index must be smaller, so no client waits for one that waits for it.
    """

    base_url: str
    model: str
    clients: int
    requests_per_client: int
    max_tokens: int
    prompts: tuple[str, ...]
    chat: bool = True
    stream: bool = True
    temperature: float = 0.0
    api_key: str = "none"
    timeout_s: float = 600
    request_timeout_s: float = 300
    token_ids: bool = False  # ask for the token ids (vLLM's `return_token_ids`)
    waits: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = ()

    def __post_init__(self) -> None:
        if self.clients < 1 or self.requests_per_client < 1 or self.max_tokens < 1:
            raise ValueError(
                "LoadConfig needs clients, requests_per_client and max_tokens >= 1, got "
                f"{self.clients}, {self.requests_per_client}, {self.max_tokens}"
            )
        if not self.prompts:
            raise ValueError("LoadConfig needs at least one prompt in prompts")
        if self.timeout_s <= 0 or self.request_timeout_s <= 0:
            raise ValueError("LoadConfig needs timeout_s and request_timeout_s > 0")
        for (client, index), (other, before) in self.waits:
            known = all(0 <= c < self.clients for c in (client, other))
            if not known or not 0 <= before < index < self.requests_per_client:
                raise ValueError(
                    f"LoadConfig.waits: request ({client}, {index}) cannot wait for "
                    f"({other}, {before}): both must be (client, index) of this run, the "
                    "one waited for at a smaller index"
                )

    def prompt_for(self, client: int, index: int) -> str:
        """The prompt of client `client`'s `index`-th request."""
        return self.prompts[(client * self.requests_per_client + index) % len(self.prompts)]


@dataclass(frozen=True)
class RequestResult:
    """One request's outcome.

    `ttft_s` is the time to the first content token of a stream, or the whole latency when not
    streaming. `completion_tokens` comes from the server's `usage` (None when it sent none).
    `extra` is the response's (or the last stream chunk's) non-standard `dynaspec` field.
    `lost` marks a request with no answer before a deadline or a stream cut short; `ok` and
    `lost` are never both true, and a request that is neither counts as failed. `token_ids`
    and `prompt_token_ids`: the ids the server sent back (`LoadConfig.token_ids`), else None.
    `sent_s`: when it was sent, seconds after the run began (None: never sent); it ended
    `latency_s` later.
    """

    client: int
    index: int
    prompt: str
    text: str
    ok: bool
    error: str | None
    ttft_s: float | None
    latency_s: float | None
    completion_tokens: int | None
    finish_reason: str | None
    extra: dict[str, Any] | None
    lost: bool = False
    token_ids: tuple[int, ...] | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    sent_s: float | None = None  # when it was sent, seconds after the run began


@dataclass(frozen=True)
class LoadResult:
    """All requests of one run, with the aggregate numbers a benchmark reports.

    Percentiles are nearest-rank (the smallest value with at least p% of the values at or
    below it), so they are always observed values. Throughputs are None when no ok request
    reported `usage`.
    """

    config: LoadConfig
    results: tuple[RequestResult, ...]
    wall_s: float
    completed: int = field(init=False)
    failed: int = field(init=False)
    lost: int = field(init=False)

    def __post_init__(self) -> None:
        lost = sum(r.lost for r in self.results)
        completed = sum(r.ok for r in self.results)
        object.__setattr__(self, "completed", completed)
        object.__setattr__(self, "lost", lost)
        object.__setattr__(self, "failed", len(self.results) - completed - lost)

    @property
    def ok_results(self) -> tuple[RequestResult, ...]:
        """The completed requests."""
        return tuple(r for r in self.results if r.ok)

    @property
    def ttft_p50(self) -> float | None:
        """Median time to first token (s) of the completed requests."""
        return percentile([r.ttft_s for r in self.ok_results if r.ttft_s is not None], 50)

    @property
    def ttft_p95(self) -> float | None:
        """95th-percentile time to first token (s) of the completed requests."""
        return percentile([r.ttft_s for r in self.ok_results if r.ttft_s is not None], 95)

    @property
    def completion_tokens(self) -> int | None:
        """Completion tokens of the completed requests, None if no server `usage` came."""
        counts = [r.completion_tokens for r in self.ok_results if r.completion_tokens is not None]
        return sum(counts) if counts else None

    @property
    def tokens_per_s_total(self) -> float | None:
        """Aggregate throughput: completion tokens of the ok requests per wall second."""
        tokens = self.completion_tokens
        if tokens is None or self.wall_s <= 0:
            return None
        return tokens / self.wall_s

    @property
    def tokens_per_s_per_client(self) -> float | None:
        """What one user sees: the median over clients of tokens / time spent on them.

        A client's time is the summed latency of its ok requests that reported usage, so
        failures and idle time after the client finished do not dilute it.
        """
        rates = []
        for client in range(self.config.clients):
            mine = [
                r
                for r in self.ok_results
                if r.client == client and r.completion_tokens is not None and r.latency_s
            ]
            busy = sum(r.latency_s or 0.0 for r in mine)
            if mine and busy > 0:
                rates.append(sum(r.completion_tokens or 0 for r in mine) / busy)
        return statistics.median(rates) if rates else None

    def summary(self) -> dict[str, Any]:
        """Flat, JSON-able numbers of the run (None where a number is not known)."""
        latencies = [r.latency_s for r in self.ok_results if r.latency_s is not None]
        return {
            "clients": self.config.clients,
            "requests_per_client": self.config.requests_per_client,
            "max_tokens": self.config.max_tokens,
            "chat": self.config.chat,
            "stream": self.config.stream,
            "completed": self.completed,
            "failed": self.failed,
            "lost": self.lost,
            "wall_s": self.wall_s,
            "ttft_p50_s": self.ttft_p50,
            "ttft_p95_s": self.ttft_p95,
            "latency_p50_s": percentile(latencies, 50),
            "latency_p95_s": percentile(latencies, 95),
            "completion_tokens": self.completion_tokens,
            "tokens_per_s_total": self.tokens_per_s_total,
            "tokens_per_s_per_client": self.tokens_per_s_per_client,
        }


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile: the ceil(p/100 * n)-th smallest value; None for no values."""
    if not values:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile p must be in [0, 100], got {p}")
    ordered = sorted(values)
    rank = max(1, math.ceil(p * len(ordered) / 100))
    return ordered[min(rank, len(ordered)) - 1]


def run_load(config: LoadConfig) -> LoadResult:
    """Run the load test to completion or to its deadline (`config.timeout_s`).

    Needs no running event loop (it calls `asyncio.run`); from async code use `run_load_async`.
    """
    return asyncio.run(run_load_async(config))


async def run_load_async(config: LoadConfig) -> LoadResult:
    """`run_load` for callers that already run an event loop."""
    client = AsyncOpenAI(
        base_url=config.base_url,
        api_key=config.api_key,
        max_retries=0,
        timeout=config.request_timeout_s,
    )
    done: list[list[RequestResult]] = [[] for _ in range(config.clients)]
    ended = {waited: asyncio.Event() for _, waited in config.waits}
    start = perf_counter()
    tasks = [
        asyncio.create_task(_client_loop(client, config, c, done[c], ended, start))
        for c in range(config.clients)
    ]
    try:
        await asyncio.wait(tasks, timeout=config.timeout_s)
        wall_s = perf_counter() - start
    finally:
        await _cancel(tasks)
        await _close(client)
    results = [r for client_results in done for r in client_results]
    results += _lost_at_deadline(config, done)
    return LoadResult(config=config, results=tuple(results), wall_s=wall_s)


async def _client_loop(
    client: AsyncOpenAI,
    config: LoadConfig,
    index: int,
    done: list[RequestResult],
    ended: dict[tuple[int, int], asyncio.Event],
    start: float,
) -> None:
    """One client: its requests one after another, each result appended as it ends; a
    request with a wait (`config.waits`) is sent once the request it waits for has ended."""
    for j in range(config.requests_per_client):
        for request, waited in config.waits:
            if request == (index, j):
                await ended[waited].wait()
        sent_s = perf_counter() - start
        result = await _one_request(client, config, index, j)
        done.append(replace(result, sent_s=sent_s))
        if (index, j) in ended:
            ended[index, j].set()


async def _cancel(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel unfinished clients and give them a bounded time to unwind."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=_CANCEL_GRACE_S)


async def _close(client: AsyncOpenAI) -> None:
    """Close the HTTP pool without letting a stuck connection hold up the run."""
    with contextlib.suppress(asyncio.TimeoutError, OSError, openai.OpenAIError):
        await asyncio.wait_for(client.close(), timeout=_CANCEL_GRACE_S)


def _lost_at_deadline(config: LoadConfig, done: list[list[RequestResult]]) -> list[RequestResult]:
    """A lost result for every request a client had not finished when the run ended."""
    error = f"no answer before the run deadline (timeout_s={config.timeout_s:g})"
    return [
        _lost(config, c, j, error)
        for c, finished in enumerate(done)
        for j in range(len(finished), config.requests_per_client)
    ]


def _lost(config: LoadConfig, client: int, index: int, error: str, text: str = "") -> RequestResult:
    """The result of a request that never got a full answer."""
    return RequestResult(
        client=client,
        index=index,
        prompt=config.prompt_for(client, index),
        text=text,
        ok=False,
        error=error,
        ttft_s=None,
        latency_s=None,
        completion_tokens=None,
        finish_reason=None,
        extra=None,
        lost=True,
    )


async def _one_request(
    client: AsyncOpenAI, config: LoadConfig, index: int, j: int
) -> RequestResult:
    """Send one request and classify its outcome (completed, failed or lost)."""
    prompt = config.prompt_for(index, j)
    base = {"client": index, "index": j, "prompt": prompt}
    start = perf_counter()
    try:
        response = await _create(client, config, prompt)
    except openai.APITimeoutError as error:
        return _lost(config, index, j, f"per-request timeout: {_describe(error)}")
    except Exception as error:  # any refusal is data, not a crash of the run
        return _failed(base, _describe(error), perf_counter() - start)
    if not config.stream:
        return _from_response(base, response, perf_counter() - start, config.chat)
    return await _from_stream(base, response, start, config)


async def _create(client: AsyncOpenAI, config: LoadConfig, prompt: str) -> Any:
    """The chat or completions call (a stream when `config.stream`)."""
    common: dict[str, Any] = {
        "model": config.model,
        "max_tokens": config.max_tokens,
        "temperature": config.temperature,
        "stream": config.stream,
    }
    if config.stream:
        common["stream_options"] = {"include_usage": True}
    if config.token_ids:
        common["extra_body"] = {"return_token_ids": True}
    if config.chat:
        messages = [{"role": "user", "content": prompt}]
        return await client.chat.completions.create(messages=messages, **common)
    return await client.completions.create(prompt=prompt, **common)


def _failed(base: dict[str, Any], error: str, latency_s: float) -> RequestResult:
    """The result of a request the server refused or could not be sent."""
    return RequestResult(
        **base,
        text="",
        ok=False,
        error=error,
        ttft_s=None,
        latency_s=latency_s,
        completion_tokens=None,
        finish_reason=None,
        extra=None,
    )


def _from_response(
    base: dict[str, Any], response: Any, latency_s: float, chat: bool
) -> RequestResult:
    """The result of a non-streaming answer (TTFT is the whole latency)."""
    choice = response.choices[0] if response.choices else None
    text = ""
    if choice is not None:
        text = (choice.message.content or "") if chat else (choice.text or "")
    return RequestResult(
        **base,
        text=text,
        ok=True,
        error=None,
        ttft_s=latency_s,
        latency_s=latency_s,
        completion_tokens=_usage_tokens(response),
        finish_reason=choice.finish_reason if choice is not None else None,
        extra=_extra(response),
        **_token_ids(response),
    )


async def _from_stream(
    base: dict[str, Any], stream: Any, start: float, config: LoadConfig
) -> RequestResult:
    """Read a stream to its end; a stream that breaks off before a finish_reason is lost."""
    pieces: list[str] = []
    ttft_s = finish_reason = tokens = extra = None
    ids: dict[str, tuple[int, ...] | None] = {}
    try:
        async for chunk in stream:
            tokens = _usage_tokens(chunk) if chunk.usage is not None else tokens
            extra = _extra(chunk) or extra
            ids = _token_ids(chunk) if "prompt_token_ids" in (chunk.model_extra or {}) else ids
            for choice in chunk.choices[:1]:
                piece = (choice.delta.content if config.chat else choice.text) or ""
                if piece and ttft_s is None:
                    ttft_s = perf_counter() - start
                pieces.append(piece)
                finish_reason = choice.finish_reason or finish_reason
    except Exception as error:  # a broken stream is data, not a crash
        if finish_reason is None:
            return _lost(config, base["client"], base["index"], _describe(error), "".join(pieces))
    latency_s = perf_counter() - start
    if finish_reason is None:
        error = "stream ended without a finish_reason"
        return _lost(config, base["client"], base["index"], error, "".join(pieces))
    return RequestResult(
        **base,
        text="".join(pieces),
        ok=True,
        error=None,
        ttft_s=ttft_s if ttft_s is not None else latency_s,
        latency_s=latency_s,
        completion_tokens=tokens,
        finish_reason=finish_reason,
        extra=extra,
        **ids,
    )


def _usage_tokens(response: Any) -> int | None:
    """`usage.completion_tokens` of a response or chunk, None when the server sent none."""
    usage = getattr(response, "usage", None)
    return getattr(usage, "completion_tokens", None) if usage is not None else None


def _token_ids(response: Any) -> dict[str, tuple[int, ...] | None]:
    """`prompt_token_ids` and the first choice's `token_ids` of a response or closing
    chunk (None where the server sent none)."""
    choices = getattr(response, "choices", None) or []
    choice_extra = (getattr(choices[0], "model_extra", None) or {}) if choices else {}
    prompt = (getattr(response, "model_extra", None) or {}).get("prompt_token_ids")
    completion = choice_extra.get("token_ids")
    return {
        "token_ids": None if completion is None else tuple(completion),
        "prompt_token_ids": None if prompt is None else tuple(prompt),
    }


def _extra(response: Any) -> dict[str, Any] | None:
    """The non-standard `dynaspec` field of a response or chunk, as a dict, if present.

    The openai models keep unknown JSON fields in pydantic's `model_extra` (as plain JSON).
    """
    value = (getattr(response, "model_extra", None) or {}).get("dynaspec")
    if value is None:
        return None
    if hasattr(value, "model_dump"):
        value = value.model_dump()
    return dict(value) if isinstance(value, dict) else {"value": value}


def _describe(error: BaseException) -> str:
    """The error's type and message, plus an HTTP status and body where there is one."""
    text = f"{type(error).__name__}: {error}"
    status = getattr(error, "status_code", None)
    if status is not None and str(status) not in text:
        text = f"HTTP {status} {text}"
    return text


def table(results: Sequence[LoadResult]) -> str:
    """A markdown table, one line per run (typically one per client count)."""
    header = (
        "| clients | ok/failed/lost | TTFT p50 (s) | TTFT p95 (s) "
        "| tok/s per client (median) | tok/s total | wall (s) |"
    )
    lines = [header, "|---:|:---:|---:|---:|---:|---:|---:|"]
    for run in results:
        cells = [
            str(run.config.clients),
            f"{run.completed}/{run.failed}/{run.lost}",
            _cell(run.ttft_p50, 3),
            _cell(run.ttft_p95, 3),
            _cell(run.tokens_per_s_per_client, 1),
            _cell(run.tokens_per_s_total, 1),
            _cell(run.wall_s, 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cell(value: float | None, digits: int) -> str:
    """A number for the table, '-' when unknown."""
    return "-" if value is None else f"{value:.{digits}f}"
