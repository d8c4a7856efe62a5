"""A draft model whose tokenizer differs from the target's: it drafts through text.

The draft cannot propose target token ids directly, so each round goes through strings, as
transformers' universal assisted generation (UAG) does:

1. The committed target tokens are decoded to text (`CommittedText`, a stream decoder: only
   the new tokens are decoded, a few before them as context, and a token that ends in the
   middle of a UTF-8 character is held back until the character is complete).
2. That text is re-encoded with the draft's tokenizer. Only a tail is re-encoded: from a
   clean token boundary a few draft tokens back (the look-behind), so that merges across
   the old end come out as the draft's tokenizer makes them; when the re-encoded tail does
   not start with the tokens it replaces, the whole text is encoded again. The draft's cache
   is cropped to the longest prefix its cached tokens share with the new ones.
3. The draft drafts greedily, up to `plan.model` of its own tokens, stopping at its EOS, at
   the stopper's word (the `DraftStep`s hold draft tokens and the draft's probabilities), or
   at the plan's end.
4. The drafted tokens are decoded (after a few committed draft tokens, as context), cut at
   the first U+FFFD (an incomplete or invalid UTF-8 sequence: no target token is built
   from part of a character), and the committed target tail (its last few tokens, from a
   clean boundary, after any special token) is re-encoded with the drafted text after it.
   Only when that re-encoding reproduces the committed tail exactly are the tokens after it
   proposed; otherwise the round proposes nothing. A draft EOS that ends complete text
   becomes the target's EOS.

Lossless: the target checks every proposed token with the usual acceptance rule, so the
output is the target's own whatever the draft proposes; only acceptance depends on the text
round trip. Greedy only (`probs=None`): speculative sampling needs the draft's distribution
over target tokens, which drafters/intersection.py gives over the tokens both share. A
proposed target token's confidence is the product of the draft's probabilities of the
drafted tokens whose text overlaps its own (1.0 when the target's tokenizer gives no
character offsets).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from typing import Any

import torch

from dynaspec.core.finite import all_finite, check_finite
from dynaspec.core.protocols import ModelAdapter, Stopper
from dynaspec.core.round import DraftOptions, DraftPlan, DraftStep, Proposal, StopReason
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.timing import device_clock
from dynaspec.core.verify import argmax
from dynaspec.drafters.shared_vocab import special_ids
from dynaspec.errors import UnsupportedOptionError

CONTEXT = 4  # tokens decoded before new ones: a first token may decode without its space
TAIL = 8  # the last tokens of a long run decoded one by one (marks for the look-behind)
TARGET_LOOKBEHIND = 6  # committed target tokens re-encoded with the drafted text
DRAFT_LOOKBEHIND = 8  # draft tokens re-encoded with the new committed text
MAX_SKIP = 2  # leading tokens a re-encoded window may add (a prefix space) and be skipped
REACH = 8  # boundaries a window's start may move further back to where a word starts
REPLACEMENT = "\ufffd"  # what decoding makes of part of a character

Span = tuple[int, int]  # (start, end) characters of a token in a text


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text of `ids`, special tokens dropped, spaces as the tokenizer made them."""
    if not ids:
        return ""
    return tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)


def encode(tokenizer: Any, text: str) -> tuple[list[int], list[Span] | None]:
    """The ids of `text` without special tokens, and each one's character span (None: a
    slow tokenizer, which gives no offsets). A fast tokenizer's own Rust tokenizer is
    called directly: what its transformers wrapper calls, without building a BatchEncoding
    (a tenth of a millisecond, twice a round)."""
    if not text:
        return [], []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        out = backend.encode(text, add_special_tokens=False)
        return list(out.ids), list(out.offsets)
    return list(tokenizer.encode(text, add_special_tokens=False)), None


def special_prefix(tokenizer: Any) -> list[int]:
    """The special tokens the tokenizer puts before a text (a BOS), so that the draft sees
    its text as it was trained to."""
    plain = tokenizer.encode("a", add_special_tokens=False)
    full = tokenizer.encode("a", add_special_tokens=True)
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start])
    return []


def draft_eos_ids(tokenizer: Any, model: Any) -> tuple[int, ...]:
    """The draft's EOS ids: its tokenizer's, and its generation config's (a model or an
    adapter holding one in `.model`)."""
    ids = {tokenizer.eos_token_id} if isinstance(tokenizer.eos_token_id, int) else set()
    for source in (model, getattr(model, "model", None)):
        value = getattr(getattr(source, "generation_config", None), "eos_token_id", None)
        values = value if isinstance(value, (list, tuple)) else [value]
        ids.update(v for v in values if isinstance(v, int))
    return tuple(sorted(ids))


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading items `a` and `b` share (list slices compared by bisection: the
    lists are the draft's whole text, and nearly all of them agree)."""
    size = min(len(a), len(b))
    if a[:size] == b[:size]:
        return size
    low, high = 0, size  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        middle = (low + high) // 2
        if a[low:middle] == b[low:middle]:
            low = middle
        else:
            high = middle
    return low


def find_tail(ids: Sequence[int], tail: Sequence[int]) -> int | None:
    """Where `tail` starts in `ids`, at most MAX_SKIP tokens in (a re-encoded window may
    begin with a token of its own, such as a prefix space); None when it is not there."""
    for skip in range(min(MAX_SKIP, len(ids) - len(tail)) + 1):
        if list(ids[skip : skip + len(tail)]) == list(tail):
            return skip
    return None


class CommittedText:
    """The committed target tokens as text, decoded as they come.

    Marks are the clean boundaries: after `counts[i]` tokens the text is `text[:chars[i]]`,
    complete characters only. New tokens are decoded with up to CONTEXT tokens before them,
    because a tokenizer may decode a first token differently (SentencePiece drops its
    space); the new text is what the decode of context + new tokens adds to that of the
    context alone. A token that leaves a character incomplete gets no mark; its text comes
    with the token that completes it. `version` changes whenever text already given
    out changes (a rebuild or a rollback), so that the draft re-encodes all of it.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.version = 0
        self.reset()

    def reset(self) -> None:
        self.text = ""
        self.counts = [0]  # target tokens at each mark, increasing
        self.chars = [0]  # len(text) at each mark
        self.version += 1

    @property
    def read(self) -> int:
        """Target tokens whose text is in `text`."""
        return self.counts[-1]

    def extend(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` (all committed ones) past `read`, marking each clean boundary; a
        long run (a prompt) is decoded at once up to its last TAIL tokens."""
        read = self.read
        if read >= len(tokens):
            return
        start = max(read - CONTEXT, 0)  # may cut a character: both decodes then start alike
        previous = decode(self.tokenizer, tokens[start:read])
        bulk = range(len(tokens) - TAIL, max(len(tokens) - TAIL - 4, read + TAIL), -1)
        for end in [*bulk, *range(read + 1, len(tokens) + 1)]:
            if end <= self.read:
                continue  # a long run covered it
            piece = decode(self.tokenizer, tokens[start:end])
            if piece.endswith(REPLACEMENT):
                continue  # a character still incomplete (or an invalid byte): wait
            if not piece.startswith(previous):  # the decoder changed earlier text
                self._rebuild(tokens[:end])
                self.extend(tokens)
                return
            self.text += piece[len(previous) :]
            self.counts.append(end)
            self.chars.append(len(self.text))
            previous = piece

    def _rebuild(self, tokens: Sequence[int]) -> None:
        """All of `tokens` decoded at once: one mark at their end."""
        self.reset()
        self.text = decode(self.tokenizer, tokens)
        self.counts.append(len(tokens))
        self.chars.append(len(self.text))

    def rollback(self, num_tokens: int) -> None:
        """Forget the text of tokens past the first `num_tokens`."""
        if num_tokens >= self.read:
            return
        keep = bisect_right(self.counts, num_tokens)
        del self.counts[keep:], self.chars[keep:]
        self.text = self.text[: self.chars[-1]]
        self.version += 1

    def mark_before(self, num_tokens: int) -> int:
        """Index of the last mark at or before `num_tokens` tokens (0 at worst)."""
        return max(bisect_right(self.counts, num_tokens) - 1, 0)

    def word_mark(self, num_tokens: int) -> int:
        """Index of the last mark at or before `num_tokens` tokens, moved back (at most
        REACH marks) to one where a word starts: whitespace follows it, or nothing precedes.
        A window of text that starts mid-word re-encodes otherwise in tokenizers that mark
        a word's start (SentencePiece's "▁", byte-level BPE's "Ġ")."""
        last = self.mark_before(num_tokens)
        for index in range(last, max(last - REACH, 0) - 1, -1):
            char = self.chars[index]
            if char == 0 or self.text[char : char + 1].isspace():
                return index
        return last

    def mark_from(self, num_tokens: int) -> int | None:
        """Index of the first mark at or after `num_tokens` tokens (None: past `read`)."""
        index = bisect_left(self.counts, num_tokens)
        return index if index < len(self.counts) else None


class CrossTokenizerDrafter:
    """Drafts with a model of another vocabulary, through text (see the module doc)."""

    def __init__(
        self,
        model: ModelAdapter,
        target_tokenizer: Any,
        draft_tokenizer: Any,
        draft_eos: tuple[int, ...] = (),
    ) -> None:
        self.model = model
        self.device = getattr(model, "device", None)
        self.target_tokenizer = target_tokenizer
        self.draft_tokenizer = draft_tokenizer
        self.draft_eos = frozenset(draft_eos)
        self.target_special = special_ids(target_tokenizer)
        self.head = special_prefix(draft_tokenizer)
        # Logit rows the draft may choose: its tokenizer's tokens (the rest pad the matrix).
        self.rows = min(len(draft_tokenizer), model.vocab_size or len(draft_tokenizer))
        self.committed = CommittedText(target_tokenizer)
        self.begin_state()

    def begin_state(self) -> None:
        """Nothing committed, nothing cached."""
        self.committed.reset()
        self.target_ids: list[int] = []  # committed target tokens seen so far (host copy)
        self.ids: list[int] = list(self.head)  # the draft's tokens for the committed text
        self.ends: list[int] = [0] * len(self.head)  # each one's end in committed.text
        self.synced: tuple[int, int] | None = None  # (version, len(text)) self.ids encode
        self.cached: list[int] = []  # the tokens in the draft's cache

    # ---- protocol ---------------------------------------------------------------------
    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        """A new sequence. The prompt's text reaches the draft with the first offer; the
        draft counts its own tokens, so `max_length` (target tokens) is not its bound and its
        cache grows as needed (a decoder-only adapter feeds nothing in begin)."""
        self.begin_state()
        start = torch.tensor([self.head or [0]], dtype=torch.long)
        self.model.begin(start, max_length=None)

    def offer(self, tokens: torch.Tensor) -> DraftOptions:
        """The draft's catch-up in its own tokens. The new committed text is decoded and
        re-encoded here, a function of the committed tokens only, kept for propose (the
        draft's cache is not touched)."""
        self._sync(tokens)
        if not self.ids:  # no text yet, and no BOS: the draft has nothing to start from
            return DraftOptions(catchup=None)
        catchup = len(self.ids) - self._agreed()
        return DraftOptions(catchup=catchup, started=self.model.num_cached > 0)

    def propose(
        self,
        tokens: torch.Tensor,
        options: DraftOptions,
        plan: DraftPlan,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
    ) -> Proposal:
        return self.draft(tokens, plan.model, stopper, sampler, eos_token_ids)

    def draft(
        self,
        tokens: torch.Tensor,
        lookahead: int,
        stopper: Stopper,
        sampler: TokenSampler,
        eos_token_ids: tuple[int, ...],
        first_index: int = 0,
    ) -> Proposal:
        """Up to `lookahead` target tokens after `tokens` (committed, then any tokens prompt
        lookup copied this round: `first_index` of them, which offsets the DraftStep index
        the stopper sees; a rejected copy is forgotten by `crop`)."""
        if sampler.config.do_sample:
            raise UnsupportedOptionError(
                "a draft with another tokenizer drafting through text is greedy only: pass "
                "do_sample=False, or draft over the shared tokens (IntersectionDrafter)"
            )
        started = device_clock(self.device)
        lookahead, pending = self._resume(tokens, lookahead)
        if lookahead <= 0:
            return Proposal(tokens.new_empty(0), None, (), draft_time_s=0.0)
        drafted, confidences, reason = self._draft(
            pending, lookahead, stopper, tokens.numel(), first_index
        )
        ended = reason == StopReason.EOS
        text, spans, complete = self._drafted_text(drafted[:-1] if ended else drafted)
        converted = self._to_target(text, spans, confidences)
        ids, probs = converted or ([], [])
        if ended and complete and eos_token_ids and converted is not None:
            ids.append(eos_token_ids[0])  # the draft's text is complete: propose the end
            probs.append(confidences[-1])
        if len(ids) > lookahead:
            ids, probs, reason = ids[:lookahead], probs[:lookahead], StopReason.MAX
        return Proposal(
            tokens=torch.tensor(ids, dtype=torch.long, device=tokens.device),
            probs=None,
            confidences=tuple(probs),
            stop_reason=reason,
            draft_time_s=device_clock(self.device) - started,
            draft_forwards=len(drafted),
            catchup=len(pending),
        )

    def crop(self, num_committed: int) -> None:
        """Forget target tokens past `num_committed` (only tokens a round proposed can be
        there); the draft's cache is cropped when the next round knows its new tokens."""
        if num_committed < len(self.target_ids):
            del self.target_ids[num_committed:]
            self.committed.rollback(num_committed)

    def _resume(self, tokens: torch.Tensor, lookahead: int) -> tuple[int, list[int]]:
        """Before drafting: the draft's tokens brought up to the committed `tokens`, its
        cache cropped to what still agrees. Returns the draft tokens that fit (0: draft
        nothing) and the draft tokens to feed first."""
        self._sync(tokens)
        lookahead = self._room(lookahead)
        if not self.ids or lookahead <= 0:
            return 0, []
        agreed = self._agreed()
        self.model.crop(agreed)
        del self.cached[agreed:]
        return lookahead, self.ids[agreed:]

    # ---- committed text -> the draft's tokens ----------------------------------------------
    def _sync(self, tokens: torch.Tensor) -> None:
        """Bring the committed text and the draft's tokens up to the committed `tokens`."""
        n = tokens.numel()
        if n < len(self.target_ids):
            self.crop(n)
        if n > len(self.target_ids):
            self.target_ids.extend(tokens[len(self.target_ids) :].tolist())
            self.committed.extend(self.target_ids)
        state = (self.committed.version, len(self.committed.text))
        if state != self.synced:
            self._realign(full=self.synced is None or state[0] != self.synced[0])
            self.synced = state

    def _realign(self, full: bool) -> None:
        """Re-encode the committed text from a clean boundary DRAFT_LOOKBEHIND tokens back
        (all of it when `full`, or when the tail does not re-encode to the tokens it had)."""
        text = self.committed.text
        cut = self._cut() if not full else len(self.head)
        start = self.ends[cut - 1] if cut > len(self.head) else 0
        ids, spans = encode(self.draft_tokenizer, text[start:])
        if cut > len(self.head):
            keep = min(2, len(self.ids) - cut)
            skip = find_tail(ids, self.ids[cut : cut + keep]) if spans is not None else None
            if skip is None:
                self._realign(full=True)
                return
            ids, spans = ids[skip:], (spans or [])[skip:]
        ends = [start + end for _, end in spans] if spans is not None else [0] * len(ids)
        for index in range(1, len(ends)):  # offsets may step back (trimmed spaces)
            ends[index] = max(ends[index], ends[index - 1])
        self.ids = self.ids[:cut] + ids
        self.ends = self.ends[:cut] + ends

    def _cut(self) -> int:
        """Where the re-encoded tail starts: DRAFT_LOOKBEHIND tokens back or up to REACH
        more, at a clean boundary (not inside a character), where a word starts if one is
        that near (see CommittedText.word_mark); never into the BOS."""
        text, head = self.committed.text, len(self.head)
        first = None  # the nearest clean boundary
        for cut in range(len(self.ids) - DRAFT_LOOKBEHIND, head, -1):
            if self.ends[cut - 1] >= self.ends[cut]:
                continue  # inside a character
            first = cut if first is None else first
            if text[self.ends[cut - 1] : self.ends[cut - 1] + 1].isspace():
                return cut
            if first - cut >= REACH:
                break
        return first if first is not None else head

    def _agreed(self) -> int:
        """Cached draft tokens that stay: the prefix shared with the new ones, all but the
        newest (which is fed to get the next logits)."""
        shared = common_prefix(self.cached, self.ids)
        return min(shared, len(self.ids) - 1, self.model.num_cached)

    def _room(self, lookahead: int) -> int:
        """Draft tokens that fit the draft's context."""
        if self.model.max_length is None:
            return lookahead
        return min(lookahead, self.model.max_length - len(self.ids))

    # ---- drafting ---------------------------------------------------------------------
    def _draft(
        self, pending: list[int], lookahead: int, stopper: Stopper, position: int, first: int = 0
    ) -> tuple[list[int], list[float], StopReason]:
        """Up to `lookahead` greedy draft tokens after `pending` (fed first), their
        probabilities, and why drafting stopped. As ModelDrafter waits for the device: per
        token for a stopper that needs confidences, else once, and the stop rules run after.
        A step's position counts the target tokens committed, then the draft tokens drafted
        (the two vocabularies do not align); its index counts from `first` (copied tokens
        before the draft's)."""
        per_token = stopper.needs_confidence
        feed = torch.tensor(pending, dtype=torch.long, device=self.device)
        checks: list[torch.Tensor] = []  # per token: (token, probability, finite), float64
        steps: list[DraftStep] = []
        reason = StopReason.MAX
        for index in range(lookahead):
            logits = self.model.forward(feed, 1)[0][: self.rows]  # (V_draft,)
            token = argmax(logits)
            probability = torch.softmax(logits.float(), dim=-1)[token]
            finite = all_finite(logits)
            checks.append(torch.stack([token.double(), probability.double(), finite.double()]))
            feed = token.view(1)
            if per_token:  # one transfer: the token, its probability and the check
                step, why = self._step(checks[-1].tolist(), index, position, stopper, first)
                steps.append(step)
                if why is not None:
                    reason = why
                    break
        fed = [step.token for step in steps]
        if not per_token and checks:  # one transfer for the whole draft, then the rules
            table = torch.stack(checks).tolist()
            fed = [int(values[0]) for values in table]
            for index, values in enumerate(table):
                step, why = self._step(values, index, position, stopper, first)
                steps.append(step)
                if why is not None:
                    reason = why
                    break
        self.cached.extend(pending + fed[:-1])  # the last drafted token was never fed
        return [step.token for step in steps], [step.confidence for step in steps], reason

    def _step(
        self, values: list[float], index: int, position: int, stopper: Stopper, first: int
    ) -> tuple[DraftStep, StopReason | None]:
        """The DraftStep of the `index`-th drafted token (host values), and why drafting
        stops there (None: on)."""
        token, confidence, finite = values
        check_finite(finite == 1.0, self.model)
        step = DraftStep(first + index, position + index, int(token), confidence)
        if step.token in self.draft_eos:
            return step, StopReason.EOS
        if stopper.should_stop(step):
            return step, stopper.reason
        return step, None

    def _drafted_text(self, drafted: list[int]) -> tuple[str, list[Span], bool]:
        """The text the drafted tokens add to the committed text, cut before any incomplete
        character; each drafted token's span in it; whether nothing was cut."""
        context = self.ids[-CONTEXT:]
        base = decode(self.draft_tokenizer, context)
        if not decode(self.draft_tokenizer, context + drafted).startswith(base):
            context, base = [], ""  # decoded alone, then
        ends: list[int | None] = []
        text = ""
        for count in range(1, len(drafted) + 1):
            text = decode(self.draft_tokenizer, context + drafted[:count])[len(base) :]
            ends.append(None if text.endswith(REPLACEMENT) else len(text))
        broken = text.find(REPLACEMENT)
        text = text if broken < 0 else text[:broken]
        return text, token_spans(ends, len(text)), broken < 0

    def _to_target(
        self, text: str, spans: list[Span], confidences: list[float]
    ) -> tuple[list[int], list[float]] | None:
        """Target tokens that continue the committed ones with `text`, and their confidences;
        None when re-encoding the committed tail with the text does not reproduce it (or,
        for no text, when the committed tokens end inside a character)."""
        n = len(self.target_ids)
        mark = self._window(n)
        if mark is None or not text:
            return ([], []) if mark is not None and self.committed.read == n else None
        first = self.committed.counts[mark]
        before = self.committed.text[self.committed.chars[mark] :]
        tail = self.target_ids[first:n]
        ids, target_spans = encode(self.target_tokenizer, before + text)
        skip = find_tail(ids, tail)
        if skip is None:
            return None
        proposed = ids[skip + len(tail) :]
        if target_spans is None:
            return proposed, [1.0] * len(proposed)
        mine = [(s - len(before), e - len(before)) for s, e in target_spans[skip + len(tail) :]]
        return proposed, [overlap_confidence(span, spans, confidences) for span in mine]

    def _window(self, n: int) -> int | None:
        """The mark where the committed tail to re-encode starts: TARGET_LOOKBEHIND tokens
        back, after the last special token (it re-encodes as itself only alone)."""
        mark = self.committed.word_mark(n - TARGET_LOOKBEHIND)
        first = self.committed.counts[mark]
        specials = [i for i in range(first, n) if self.target_ids[i] in self.target_special]
        if specials:
            return self.committed.mark_from(specials[-1] + 1)
        return mark


def token_spans(ends: list[int | None], length: int) -> list[Span]:
    """Each drafted token's span from the text's length after it (None: the token left a
    character incomplete; it shares the span of the token that completes it)."""
    spans: list[Span] = []
    for index in range(len(ends)):
        start = next((e for e in reversed(ends[:index]) if e is not None), 0)
        end = next((e for e in ends[index:] if e is not None), length)
        spans.append((min(start, length), min(end, length)))
    return spans


def overlap_confidence(span: Span, spans: list[Span], confidences: list[float]) -> float:
    """The product of the draft's probabilities of the drafted tokens whose text overlaps
    `span` (a target token's): the chance the draft made all of its text."""
    product = 1.0
    for (start, end), confidence in zip(spans, confidences, strict=False):
        if start < span[1] and end > span[0]:
            product *= confidence
    return product
