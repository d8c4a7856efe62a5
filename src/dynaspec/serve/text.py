"""A request's text as its tokens arrive: deltas safe to send, and OpenAI's stop sequences.

After every round the new tokens are decoded with the ones before them (a token may complete
a character, or change how the one before it reads); the text sent so far is never taken
back, so a delta holds back an incomplete character (U+FFFD at the end) and any ending that
could still become a stop sequence. A stop sequence ends the text before it, as in OpenAI's
API (transformers' `stop_strings` keep it; the server cuts it off).
"""

from __future__ import annotations

from typing import Any


class TextStream:
    """The text of one request's new tokens."""

    def __init__(self, tokenizer: Any, stops: tuple[str, ...] = ()) -> None:
        self.tokenizer = tokenizer
        self.stops = stops
        self.tokens: list[int] = []
        self.text = ""  # the whole text so far (cut at a stop sequence once one is found)
        self.sent = 0  # characters of `text` already handed out
        self.stopped = False  # a stop sequence was found

    def feed(self, tokens: list[int]) -> str:
        """Adds new tokens; returns the text that may be sent now ("" when none)."""
        if self.stopped:
            return ""
        self.tokens.extend(tokens)
        text = self.tokenizer.decode(self.tokens, skip_special_tokens=True)
        start = max(self.sent - max((len(stop) for stop in self.stops), default=0), 0)
        found = [p for p in (text.find(stop, start) for stop in self.stops) if p >= 0]
        if found:
            self.text, self.stopped = text[: min(found)], True
            return self._take(len(self.text))
        self.text = text
        return self._take(len(text) - self._held(text))

    def finish(self) -> str:
        """The rest of the text at the end of generation (nothing is held back any more)."""
        return self._take(len(self.text))

    def _take(self, end: int) -> str:
        if end <= self.sent:
            return ""
        delta = self.text[self.sent : end]
        self.sent = end
        return delta

    def _held(self, text: str) -> int:
        """Characters at the end that must wait: an incomplete character, or the start of
        a stop sequence."""
        if text.endswith("\ufffd"):
            return len(text) - len(text.rstrip("\ufffd"))
        longest = min(max((len(stop) for stop in self.stops), default=1) - 1, len(text))
        for size in range(longest, 0, -1):
            tail = text[-size:]
            if any(stop.startswith(tail) for stop in self.stops):
                return size
        return 0
