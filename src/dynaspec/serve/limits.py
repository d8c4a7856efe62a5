"""A request-body size limit as ASGI middleware: 413 before a large body is read."""

from __future__ import annotations

import json
from typing import Any


class BodyLimit:
    """Refuses bodies over `max_bytes`: at once when Content-Length says so, else as soon
    as the bytes received pass the limit (a chunked upload)."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen, refused = 0, False

        async def counted() -> dict:
            """The app's receive: past the limit, answer 413 and tell the app the client
            left (FastAPI would turn an exception raised here into its own 400)."""
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request" and not refused:
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: dict) -> None:
            if not refused:  # after the 413 the app's own answer goes nowhere
                await send(message)

        await self.app(scope, counted, guarded)

    async def _refuse(self, send: Any) -> None:
        body = json.dumps(
            {
                "error": {
                    "message": f"the request body is larger than {self.max_bytes} bytes: "
                    "send a shorter prompt (or restart the server with a larger "
                    "--max-body-bytes)",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "request_too_large",
                }
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})
