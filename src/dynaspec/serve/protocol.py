"""OpenAI's request and response shapes for `/v1/chat/completions` and `/v1/completions`.

Requests are checked by pydantic; a field that dynaspec cannot honour is refused with a 400
that names it (`n` > 1, logprobs, tools, penalties, logit_bias, response_format other than
text), and fields that change nothing here (user, metadata, store, ...) are accepted and
ignored, as OpenAI-compatible servers do. Responses are plain dicts in OpenAI's shapes, plus
one extra field, `dynaspec`, with the request's speculation stats (clients ignore it). As in
vLLM, `return_token_ids: true` adds the prompt's and the completion's token ids (a stream
sends them in its closing chunk). dynaspec's own fields, extra in OpenAI's terms as vLLM's
and SGLang's sampling fields are: `draft_sources` and `seed_mode` ("keyed" or "stream").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# Fields refused when set to anything but their neutral value: field -> neutral value.
_REFUSED = {
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "tools": (None, []),
    "tool_choice": (None, "none"),
    "functions": (None, []),
    "logit_bias": (None, {}),
    "frequency_penalty": (None, 0, 0.0),
    "presence_penalty": (None, 0, 0.0),
    "best_of": (None, 1),
    "echo": (None, False),
    "suffix": (None, ""),
}


class ServeError(Exception):
    """An HTTP error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    """What both endpoints take."""

    model_config = ConfigDict(extra="allow")

    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    # dynaspec's: what `seed` means (docs/usage.md, "Seeds"): "keyed" (None: the default),
    # the target alone's text for the seed whatever drafts it; "stream", a seeded random
    # stream verified by rejection sampling (accepts more; repeats only over the same drafts)
    seed_mode: Literal["keyed", "stream"] | None = None
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM's extension: the prompt's and the completion's token ids in the response
    return_token_ids: bool = False
    # dynaspec's: the draft sources this request may use (None: all the server has; []:
    # none, the target alone); the output is the target's either way
    draft_sources: list[Literal["model", "lookup", "suffix"]] | None = None
    user: str | None = None  # OpenAI's end-user id: the suffix cache's scope under "user"

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences")
        if any(not stop for stop in stops):
            raise ValueError("an empty stop sequence would stop at once: drop it")
        return value

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def refuse_unsupported(self) -> None:
        """400 for what this server cannot do, naming the field."""
        if self.n != 1:
            raise ServeError(400, "n must be 1: send one request per completion", param="n")
        for name, neutral in _REFUSED.items():
            value = (self.model_extra or {}).get(name, getattr(self, name, None))
            if value not in neutral:
                raise ServeError(
                    400, f"{name} is not supported by dynaspec serve: drop it", param=name
                )
        if self.seed_mode is not None and self.seed is None:
            raise ServeError(
                400,
                "seed_mode says what a seed means: send a seed with it, or drop seed_mode",
                param="seed_mode",
            )
        response_format = (self.model_extra or {}).get("response_format")
        if response_format not in (None, {"type": "text"}):
            raise ServeError(
                400, "response_format must be text (no JSON mode)", param="response_format"
            )

    def generation_keywords(self, max_new_tokens: int) -> dict[str, Any]:
        """transformers' generation keywords of this request (generate()'s names)."""
        sampled = self.temperature is not None and self.temperature > 0
        keywords: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": sampled}
        if sampled:
            keywords["temperature"] = self.temperature
            keywords["top_p"] = self.top_p if self.top_p is not None else 1.0
        if self.seed is not None:
            keywords["seed"] = self.seed
            keywords["seed_mode"] = self.seed_mode or "keyed"
        return keywords


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        for part in self.content:
            if part.type != "text":
                raise ServeError(
                    400, f"message parts of type {part.type!r} are not supported: send text"
                )
        return "".join(part.text or "" for part in self.content)


class ChatRequest(_Common):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int]

    def wanted_tokens(self) -> int | None:
        return self.max_tokens

    def text(self) -> str | list[int]:
        """The prompt: a string, or token ids; a list of strings must hold one."""
        if isinstance(self.prompt, str):
            return self.prompt
        if self.prompt and all(isinstance(item, str) for item in self.prompt):
            if len(self.prompt) != 1:
                raise ServeError(400, "send one prompt per request", param="prompt")
            return self.prompt[0]  # type: ignore[return-value]
        return list(self.prompt)  # type: ignore[arg-type]


def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def with_token_ids(
    body: dict[str, Any], prompt: Sequence[int], completion: Sequence[int]
) -> dict[str, Any]:
    """`body` (a response or a closing chunk) with the token ids a request asked for
    (`return_token_ids`, as vLLM names them): `prompt_token_ids` beside the choices and
    `token_ids` in the choice (every generated token, a stop sequence's included)."""
    body["prompt_token_ids"] = list(prompt)
    body["choices"][0]["token_ids"] = list(completion)
    return body


def response(
    ident: str,
    model: str,
    chat: bool,
    text: str,
    finish_reason: str,
    used: dict[str, int],
    stats: dict[str, Any],
) -> dict[str, Any]:
    """The whole (non-streaming) response."""
    if chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason,
            "logprobs": None,
        }
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish_reason, "logprobs": None}
    return {
        "id": ident,
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": used,
        "dynaspec": stats,
    }


def chunk(
    ident: str,
    model: str,
    chat: bool,
    delta: dict[str, str] | None = None,
    finish_reason: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed chunk: a text delta, or the closing one with its finish_reason.
    `delta` (chat): {"role": ...} or {"content": ...}; completions take delta["content"]."""
    delta = delta or {}
    if chat:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": delta.get("content", ""), "finish_reason": finish_reason}
    body = {
        "id": ident,
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
    }
    body.update(extra or {})
    return body
