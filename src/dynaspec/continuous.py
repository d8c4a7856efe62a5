"""Continuous batching: sequences join and leave a running batch between rounds.

`ContinuousBatch` holds the rows being generated and runs one batch round at a time
(core/batch_loop.py's `batch_round`, the round of `generate()` over a batch). Between rounds a
new row joins (`join`: its prompt is prefilled by the target's forwards of its own, whole or in
chunks between rounds (`joining`, `prefill`) so that a long prompt does not stall the rows
already generating; its first new token comes at once from a forward of its last prompt token
(`admit`; a seeded sampled row's from the next round, with the others', so that it draws as
generate(seed=...) alone does); the draft model reads the prompt only when the adaptive rule
starts the row, as it starts the lagging rows of a fixed batch: a catch-up priced against the
tokens it saves, never on the way to the first token) and rows that have ended or were
cancelled leave (`leave`: their cache rows are dropped at once). Each row has its own settings
(new tokens, sampling, seed, processors), as one `generate()` call would, and the adaptive
rule sees the batch as it is in every round.

A row's output does not depend on the other rows: its tokens are verified by the target as
they would be alone (the same acceptance rule and processors); the batched forwards give a
row its logits alone bit for bit on a bit-exact static target (bf16: backends/static_batch.py),
and elsewhere differ from one row's only in floating-point rounding (up to ties).

Not thread-safe: one thread (serve/'s engine thread) owns a ContinuousBatch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dynaspec.backends.graphs import verify_buckets
from dynaspec.backends.static_batch import batch_adapter
from dynaspec.backends.weights import draft_cost_ratio
from dynaspec.batch import (
    DraftSources,
    batch_policy,
    check_batch_pair,
    draft_texts,
    shares_forwards,
)
from dynaspec.compat.validation import check_text_options, check_token_ids, eos_ids
from dynaspec.core.batch_loop import batch_round, first_token
from dynaspec.core.config import SpecConfig
from dynaspec.core.protocols import BatchPolicy, LookaheadPolicy
from dynaspec.core.request import Request
from dynaspec.core.round import Round
from dynaspec.core.row import Row
from dynaspec.drafters import lookup_config
from dynaspec.drafters.batch import DRAFT_SOURCES
from dynaspec.drafters.suffix_cache import DEFAULT_SCOPE, SuffixCache
from dynaspec.errors import ConfigError, InputError
from dynaspec.policies import make_policy
from dynaspec.request import CallOptions, make_request, resolve_call


@dataclass
class Joining:
    """A row whose prompt is being prefilled (in chunks, between rounds), before it joins."""

    row: Row
    prompt: torch.Tensor  # (n,) its prompt; the target prefills the first n - 1 tokens
    done: int = 0  # prompt tokens cached so far
    target_cache: Any = None  # the target's cache of them (None: none yet)
    seconds: float = 0.0  # the target's prefill so far
    scope: str | None = None  # the suffix cache's scope it reads (None: the default)
    sources: Collection[str] | None = None  # the draft sources it may use (None: all)

    @property
    def ready(self) -> bool:
        return self.done >= self.prompt.numel() - 1

    @property
    def left(self) -> int:
        """Prompt tokens still to prefill."""
        return max(self.prompt.numel() - 1 - self.done, 0)


class ContinuousBatch:
    """The rows of a running batch over one target (and draft model or prompt lookup)."""

    def __init__(
        self,
        target: Any,
        draft: Any = None,
        spec: SpecConfig | None = None,
        prompt_lookup_num_tokens: int | None = None,
        max_matching_ngram_size: int | None = None,
        *,
        tokenizer: Any = None,
        assistant_tokenizer: Any = None,
        cross_tokenizer: str = "auto",
        policy: BatchPolicy | Callable[[], LookaheadPolicy] | None = None,
        suffix_cache: SuffixCache | None = None,
    ) -> None:
        """As generate(): `tokenizer` and `assistant_tokenizer` (the draft's) for a draft
        with another vocabulary, drafting by `cross_tokenizer` ("auto": "string", through
        text, greedy only; "intersection" samples too); `policy` a BatchPolicy (one that
        can `join` rows) or a function that makes each joining row a policy object of its
        own (it plans with it as generate(policy=...) does), instead of the schedule's;
        `suffix_cache` drafts from what earlier rows of the same scope (`joining`'s) wrote,
        each row added when it leaves (not with a draft of another vocabulary)."""
        self.model = target
        self.target = batch_adapter(target)
        texts = draft_texts(target, draft, tokenizer, assistant_tokenizer)
        draft_batch = batch_adapter(draft) if draft is not None and texts is None else None
        check_batch_pair(self.target, draft_batch)
        spec = spec or SpecConfig()
        lookup = lookup_config(prompt_lookup_num_tokens, max_matching_ngram_size, spec)
        method = check_text_options(texts, False, cross_tokenizer) if texts else None
        self.texts, self.method = texts, method
        # prompt lookup never copies past the target's EOS ids
        eos = eos_ids(None, target)
        self.suffix_cache = None if texts else suffix_cache  # (not with another vocabulary)
        suffix = None if self.suffix_cache is None else self.suffix_cache.scope(DEFAULT_SCOPE)
        sources = DraftSources(draft, draft_batch, lookup, texts, method, suffix)
        # the batch drafter that drafts for all rows, or what makes each joining row its own
        self.drafter, self.new_drafter = sources.choose(self.target.vocab_size, eos)
        shared = shares_forwards(self.target, self.new_drafter is not None)
        cost = draft_cost_ratio(target, draft)
        # the batch rule that plans the rows together, or None: each row plans with its own
        # policy, made as it joins by `new_policy`
        self.policy: BatchPolicy | None = None
        self.new_policy: Callable[[], LookaheadPolicy] = lambda: make_policy(spec, cost)
        if policy is None:
            packed, buckets = self.target.packs_rows, verify_buckets(self.target)
            self.policy = batch_policy(spec, 0, cost, packed, shared=shared, buckets=buckets)
        elif isinstance(policy, BatchPolicy):
            self.policy = policy
        elif callable(policy):
            self.new_policy = policy
        else:
            raise ConfigError(
                f"policy= takes a BatchPolicy or a function that makes a policy per row "
                f"(e.g. lambda: dynaspec.AdaptivePolicy()), got a {type(policy).__name__}"
            )
        self.rows: list[Row] = []

    @property
    def max_length(self) -> int | None:
        """The target's context: prompt + new tokens of a row must fit in it."""
        return self.target.max_length

    def make_request(
        self, prompt: Sequence[int] | torch.Tensor, kwargs: dict[str, Any], tokenizer: Any = None
    ) -> Request:
        """The Request for `prompt` with transformers' generation keywords `kwargs`
        (max_new_tokens, do_sample, temperature, top_p, seed and seed_mode (as
        generate()'s), ...), checked as generate() checks them (ConfigError, InputError)."""
        ids = torch.as_tensor(prompt, dtype=torch.long).reshape(-1)
        if not ids.numel():
            raise InputError("the prompt has no tokens: send at least one")
        check_token_ids(ids, self.target.vocab_size)
        keywords = dict(kwargs)
        seed, seed_mode = keywords.pop("seed", None), keywords.pop("seed_mode", "keyed")
        options = CallOptions(
            seed=seed, seed_mode=seed_mode, tokenizer=tokenizer, keywords=keywords
        )
        call = resolve_call(self.model, options, ids.numel(), self.target.vocab_size, time.time())
        if self.texts is not None:  # what such a draft cannot do, as generate() refuses it
            check_text_options(self.texts, call.settings.sampling.do_sample, self.method)
        return make_request(call, ids[None])

    def make_row(
        self, prompt: Sequence[int] | torch.Tensor, kwargs: dict[str, Any], tokenizer: Any = None
    ) -> Row:
        """A row for `prompt` (its `make_request`'s), not joined yet."""
        return self.make_request(prompt, kwargs, tokenizer).row()

    def joining(
        self,
        row: Row,
        prompt: Sequence[int] | torch.Tensor,
        scope: str | None = None,
        sources: Collection[str] | None = None,
    ) -> Joining:
        """`row` (from make_row) on its way in: its prompt is prefilled by `prefill`, in
        chunks between rounds if need be, then `join` adds it. It reads and adds to the
        suffix cache's `scope` (None: the default one) and drafts from `sources` only
        ("model", "lookup", "suffix"; None: all the batch has; empty: none). A row that
        samples with a "stream" seed does not read the suffix cache: such a seed repeats its
        text only over the same drafts, and the cache's text changes between requests (a
        "keyed" seed's text is the target's with that seed whatever the drafts)."""
        self.check_sources(sources)
        ids = torch.as_tensor(prompt, dtype=torch.long).reshape(-1)
        sampling = row.sampler.config
        seeded = sampling.do_sample and sampling.seed is not None
        if seeded and sampling.seed_mode == "stream" and self.suffix_cache is not None:
            # a stream seed repeats a text only over the same drafts, and the cache's change
            sources = set(DRAFT_SOURCES if sources is None else sources) - {"suffix"}
        return Joining(row, ids, scope=scope, sources=sources)

    def check_sources(self, sources: Collection[str] | None) -> None:
        """InputError unless a row may be limited to `sources` (None: all, always)."""
        unknown = set(sources or ()) - set(DRAFT_SOURCES)
        if unknown:
            raise InputError(
                f"unknown draft sources {sorted(unknown)}: name some of {list(DRAFT_SOURCES)}"
            )
        if sources is not None and self.new_drafter is not None:
            raise InputError(
                "a draft of another vocabulary drafts from every source: leave the draft "
                "sources out"
            )

    def prefill(self, joining: Joining, max_tokens: int | None = None) -> bool:
        """Prefills at most `max_tokens` more of the joining row's prompt (None: the rest) in
        the target's cache by forwards of its own, `max_tokens` rounded down to whole blocks
        of the target's `prefill_block` (at least one: a bit-exact adapter's prefill attends
        by blocks, so that its tokens attend as in a prefill in one piece); whether it is all
        cached now (the row can join). The draft model reads none of it here
        (`BatchDrafter.join`)."""
        head = joining.prompt[:-1]
        block = getattr(self.target, "prefill_block", 1)  # a bit-exact adapter's: as alone
        if max_tokens is not None:
            max_tokens = max(max_tokens // block, 1) * block
        stop = head.numel() if max_tokens is None else min(head.numel(), joining.done + max_tokens)
        chunk = head[joining.done : stop]
        start = time.perf_counter()
        with torch.inference_mode():
            joining.target_cache = self.target.prefill(chunk, joining.target_cache)
        joining.seconds += time.perf_counter() - start
        joining.done = stop
        return joining.ready

    def join(self, row: Row, prompt: Sequence[int] | torch.Tensor) -> Round | None:
        """Adds `row` (from make_row) with its prompt, prefilled at once (`admit`)."""
        return self.admit(self.joining(row, prompt))

    def admit(self, joining: Joining) -> Round | None:
        """Adds a joining row (what `prefill` has not cached yet is prefilled now) and gives
        it its first new token at once (`first_token`: a forward of its last prompt token
        alone), unless it samples with a seed; returns the record of that first round."""
        ids, row = joining.prompt, joining.row
        row.begin(ids)
        if not joining.ready:  # join's prefill, timed as prefill's
            self.prefill(joining)
        with torch.inference_mode():
            self.target.join(ids, joining.target_cache)
            if self.drafter is not None:
                self.drafter.join(ids, joining.scope, joining.sources)
            elif self.new_drafter is not None:  # a drafter of its own, begun as alone
                row.drafter = self.new_drafter()
                row.drafter.begin(ids[None])
        if self.policy is not None:
            self.policy.join(joining.done, joining.seconds)
        elif row.policy is None:
            row.policy = self.new_policy()
        self.rows.append(row)
        sampler = row.sampler  # a seeded stream draws its first token with the next round
        if sampler.config.do_sample and sampler.config.seed is not None and not sampler.keyed_seed:
            return None
        try:
            with torch.inference_mode():
                return first_token(self.target, self.rows, len(self.rows) - 1)
        except Exception:
            self.leave(lambda other: other is row)  # the batch stays as it was
            raise

    def step(self) -> list[Round | None]:
        """One round over the rows; each row's record (None: it had ended before)."""
        if not self.rows:
            return []
        with torch.inference_mode():
            return batch_round(
                self.target, self.drafter, self.policy, self.rows, time.perf_counter()
            )

    def leave(self, gone: Callable[[Row], bool]) -> list[Row]:
        """Drops the rows for which `gone(row)` holds (ended, cancelled); returns them."""
        keep = [index for index, row in enumerate(self.rows) if not gone(row)]
        if len(keep) == len(self.rows):
            return []
        left = [row for row in self.rows if gone(row)]
        if self.drafter is not None:  # its text drafts later rows of its scope
            for index in sorted(set(range(len(self.rows))) - set(keep)):
                row = self.rows[index]
                self.drafter.remember(index, row.committed[row.pads :])
        with torch.inference_mode():
            self.target.leave(keep)
            if self.drafter is not None:
                self.drafter.leave(keep)
        self.rows = [self.rows[index] for index in keep]
        for row in left:  # a row that ended has had its streamer's end(); one cut short now
            if row.streamer is not None and not row.done:
                row.streamer.end()
        return left
