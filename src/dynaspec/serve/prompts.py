"""Requests into token ids: the chat template for chat messages, the tokenizer for text.

With a chat template, the messages are rendered as transformers serve renders them
(`apply_chat_template(messages, add_generation_prompt=True)`), so a single user message
gives the same ids as `dynaspec generate "text"`. A tokenizer without one (the tiny pair)
gets the messages' texts joined by newlines, as `generate` feeds a prompt without a template.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dynaspec.serve.protocol import Message, ServeError


class Prompter:
    """Renders and tokenizes the prompts of one model."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def chat(self, messages: Sequence[Message]) -> list[int]:
        if getattr(self.tokenizer, "chat_template", None):
            turns = [{"role": m.role, "content": m.text()} for m in messages]
            try:
                encoded = self.tokenizer.apply_chat_template(
                    turns, add_generation_prompt=True, return_dict=True
                )
            except Exception as error:  # a template that rejects the turns (e.g. their order)
                raise ServeError(400, f"the chat template rejected the messages: {error}") from None
            ids = encoded["input_ids"] if isinstance(encoded, Mapping) else encoded
            return self._checked(list(ids), "messages")
        text = "\n".join(m.text() for m in messages)
        return self._checked(self.tokenizer(text)["input_ids"], "messages")

    def completion(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self._checked(self.tokenizer(prompt)["input_ids"], "prompt")
        return self._checked(prompt, "prompt")

    def _checked(self, ids: Sequence[int], param: str) -> list[int]:
        ids = [int(token) for token in ids]
        if not ids:
            raise ServeError(400, f"the {param} gave no tokens: send some text", param=param)
        vocab = len(self.tokenizer)
        if any(not 0 <= token < vocab for token in ids):
            raise ServeError(400, f"token ids must lie in [0, {vocab})", param=param)
        return ids
