"""The server's settings (the `dynaspec serve` flags), one frozen record."""

from __future__ import annotations

from dataclasses import dataclass

from dynaspec.drafters.suffix_cache import DEFAULT_SIZE_MB
from dynaspec.serve.protocol import ServeError

SCOPES = ("key", "user", "shared")  # --suffix-scope (serve/sources.py)


@dataclass(frozen=True)
class ServeConfig:
    """How the server listens and what it accepts."""

    model_name: str  # the only `model` requests may name (GET /v1/models)
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = 8000
    max_batch: int = 4  # rows generated together
    max_queue: int = 16  # requests waiting for a row; beyond: 429
    prefill_chunk: int | None = 256  # a joining prompt's tokens prefilled between two rounds
    #                                  while other rows generate (None: all at once)
    api_key: str | None = None  # every endpoint but /health needs it when set
    max_body_bytes: int = 1 << 20  # larger request bodies: 413
    default_max_tokens: int = 256  # max_tokens when a request leaves it out
    max_tokens_limit: int = 4096  # the most max_tokens a request may ask for
    suffix_cache_mb: float = DEFAULT_SIZE_MB  # the suffix cache's memory (estimated; 0: no cache)
    suffix_scope: str = "key"  # whose text a request drafts from: "key" (the API key it
    #                            presents), "user" (and its `user` field), "shared" (all)

    def max_new_tokens(self, prompt_tokens: int, wanted: int | None, context: int | None) -> int:
        """The request's new tokens: what it asked for, within the limits and the context;
        a 400 that says what fits when it cannot be served."""
        room = None if context is None else context - prompt_tokens
        if room is not None and room < 1:
            raise ServeError(
                400,
                f"the prompt has {prompt_tokens} tokens and the model's context is {context}: "
                "shorten the prompt",
                param="messages",
                code="context_length_exceeded",
            )
        if wanted is None:
            return self.default_max_tokens if room is None else min(self.default_max_tokens, room)
        if wanted > self.max_tokens_limit:
            raise ServeError(
                400,
                f"max_tokens {wanted} is above this server's limit {self.max_tokens_limit}: "
                "ask for fewer (or restart the server with a larger --max-tokens-limit)",
                param="max_tokens",
            )
        if room is not None and wanted > room:
            raise ServeError(
                400,
                f"max_tokens {wanted} does not fit: the prompt has {prompt_tokens} tokens and "
                f"the context {context}, so at most {room} new tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return wanted
