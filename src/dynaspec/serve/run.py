"""Builds a server from loaded models and runs it with uvicorn (SIGINT/SIGTERM: uvicorn
stops taking connections, the requests already running finish, then the engine stops; uvicorn
then re-raises the signal, so the process ends as one the signal stopped, e.g. exit status
143 in a shell for SIGTERM)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from dynaspec.continuous import ContinuousBatch
from dynaspec.core.config import SpecConfig
from dynaspec.drafters.suffix_cache import SuffixCache
from dynaspec.serve.config import ServeConfig
from dynaspec.serve.engine import Engine
from dynaspec.serve.metrics import Metrics
from dynaspec.serve.prompts import Prompter


def build_app(
    target: Any,
    draft: Any,
    tokenizer: Any,
    config: ServeConfig,
    spec: SpecConfig | None = None,
    prompt_lookup_num_tokens: int | None = None,
    *,
    draft_tokenizer: Any = None,
    cross_tokenizer: str = "auto",
) -> Any:
    """The ASGI app over its own engine, which its lifespan starts and stops.
    `draft_tokenizer`: the draft's own, when it has another vocabulary than the target's
    (it drafts by `cross_tokenizer`, as generate()'s assistant_tokenizer=)."""
    from fastapi import FastAPI

    from dynaspec.serve.app import create_app

    batch = ContinuousBatch(
        target,
        draft,
        spec,
        prompt_lookup_num_tokens,
        tokenizer=tokenizer if draft_tokenizer is not None else None,
        assistant_tokenizer=draft_tokenizer,
        cross_tokenizer=cross_tokenizer,
        suffix_cache=SuffixCache(config.suffix_cache_mb) if config.suffix_cache_mb > 0 else None,
    )
    engine = Engine(batch, Metrics(), config.max_batch, config.max_queue, config.prefill_chunk)
    app = create_app(engine, Prompter(tokenizer), config)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.stop(timeout=60)
            print("dynaspec serve: requests drained, engine stopped", file=sys.stderr, flush=True)

    app.router.lifespan_context = lifespan
    return app


def serve(app: Any, config: ServeConfig, log_level: str = "info", drain_s: float = 60) -> None:
    """Runs the app until SIGINT/SIGTERM; running requests get `drain_s` seconds to end."""
    import uvicorn

    uvicorn.run(
        app,
        host=config.host,
        port=config.port,
        log_level=log_level,
        timeout_graceful_shutdown=drain_s,
    )


@contextlib.contextmanager
def in_thread(app: Any, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """Runs `app` with uvicorn on a thread of this process (port 0: a free one); yields the
    server's base URL, e.g. "http://127.0.0.1:43121", and stops it afterwards. For tests
    and `dynaspec loadtest`."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="dynaspec-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server did not start on {host}:{port}")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        thread.join(60)
