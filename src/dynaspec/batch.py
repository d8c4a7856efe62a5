"""`dynaspec.generate` over a batch: input_ids of shape (B, T), left-padded as transformers
pads for generation (`tokenizer.padding_side = "left"`), with the matching attention_mask.

Every row gets what one sequence gets (its own Request, dynaspec/request.py: its sampler,
processors, stopping criteria and streamer; its own policy and stats) and the models run each
round's forwards for all rows at once (core/batch_loop.py, backends/hf_batch.py,
drafters/batch.py). `sequences` is (B, T + new): each row's padded
prompt, its new tokens, then `pad_token_id` after its end, as transformers' batched generate
returns it. With output_scores/output_logits, `scores`/`logits` hold one (B, V) tensor per
step, as transformers returns a batch's: row r of step i is the row's own (1, V) row while it
is going; after its end, a point mass on the pad token (0 there, -inf elsewhere), where
transformers would run the model on over its padding (a row that ended emits the pad token
for sure, so `compute_transition_scores` gives it a log-probability of 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import dynaspec.drafters as drafters
from dynaspec.backends.graphs import verify_buckets
from dynaspec.backends.hf import as_adapter
from dynaspec.backends.row_adapters import RowAdapters, own_adapter
from dynaspec.backends.static_batch import batch_adapter
from dynaspec.backends.weights import draft_cost_ratio
from dynaspec.compat.settings import pad_token_id
from dynaspec.compat.validation import (
    check_batch,
    check_call_arguments,
    check_text_options,
    check_token_ids,
    text_pair,
)
from dynaspec.core.batch_loop import decode_batch
from dynaspec.core.config import SpecConfig
from dynaspec.core.loop import GenerateOutput
from dynaspec.core.protocols import BatchModelAdapter, BatchPolicy, Drafter, LookaheadPolicy
from dynaspec.core.request import Request
from dynaspec.core.row import Row
from dynaspec.core.sharing import outside_inference_mode
from dynaspec.core.stats import GenerationStats
from dynaspec.drafters.batch import SHARED_FORWARDS, BatchDrafter
from dynaspec.drafters.suffix_cache import SuffixScope
from dynaspec.errors import (
    IncompatibleModelsError,
    InsufficientMemoryError,
    UnsupportedOptionError,
)
from dynaspec.meminfo import SKIP_ENV, available_bytes, check_skipped
from dynaspec.policies import make_policy
from dynaspec.policies.batch_adaptive import BatchAdaptivePolicy
from dynaspec.request import CallOptions, make_request, resolve_call


def is_batch(input_ids: Any) -> bool:
    """Whether `input_ids` holds more than one row."""
    return isinstance(input_ids, torch.Tensor) and input_ids.dim() == 2 and input_ids.shape[0] > 1


def generate_batch(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: CallOptions,
    started: float,
) -> GenerateOutput:
    """generate() for (B, T) input_ids: the call's options typed (CallOptions), a Request
    per row (dynaspec/request.py); started: time.time() at the call's start."""
    ids, mask = check_batch(input_ids, attention_mask, options.keywords.get("pad_token_id"))
    streamers, given = check_row_options(len(ids), options)
    texts = draft_texts(target, draft, options.tokenizer, options.assistant_tokenizer)
    target_batch = batch_adapter(target)
    draft_batch = batch_adapter(draft) if draft is not None and texts is None else None
    call = resolve_call(target, options, ids.shape[1], target_batch.vocab_size, started)
    do_sample = call.settings.sampling.do_sample
    method = check_text_options(texts, do_sample, options.cross_tokenizer)
    limits = call.settings.limits
    check_batch_pair(target_batch, draft_batch)
    check_token_ids(ids, target_batch.vocab_size)
    ids, mask = ids.to(target_batch.device), mask.to(target_batch.device)
    check_cache_memory((target_batch, draft_batch), len(ids), ids.shape[1] + limits.max_new_tokens)
    requests = [
        make_request(
            call, ids[i : i + 1], pads=int((mask[i] == 0).sum()), row=i, rows=len(ids), streamer=one
        )
        for i, one in enumerate(streamers)
    ]
    rows = [request.row() for request in requests]
    suffix = options.suffix()
    sources = DraftSources(draft, draft_batch, options.lookup(), texts, method, suffix)
    drafter, make = sources.choose(target_batch.vocab_size, limits.eos_token_ids)
    for row in rows if make is not None else ():
        row.drafter = make()  # each row drafts with its own, as alone
    policy = given if isinstance(given, BatchPolicy) else None
    if given is None:
        cost = draft_cost_ratio(target, draft)
        shared = shares_forwards(target_batch, make is not None)
        packed = target_batch.packs_rows
        buckets = verify_buckets(target_batch)
        policy = batch_policy(
            options.spec, len(rows), cost, packed, fixed=True, shared=shared, buckets=buckets
        )
        given = [make_policy(options.spec, cost) for _ in rows] if policy is None else None
    if isinstance(given, list):  # each row plans with its own policy
        for row, own in zip(rows, given, strict=True):
            row.policy = own
    with torch.inference_mode():
        wall = decode_batch(target_batch, drafter, ids, mask, rows, policy)
    if suffix is not None:  # the rows share one index
        for row in rows:
            suffix.add(row.committed[row.pads :].tolist())
    given = options.keywords.get("pad_token_id")
    pad = pad_token_id(target, given=given, eos_token_ids=limits.eos_token_ids)
    output = _output(requests, rows, ids.shape[1], 0 if pad is None else pad, wall)
    return outside_inference_mode(output)  # the caller's own tensors, as transformers' are


def batch_policy(
    spec: SpecConfig,
    rows: int,
    draft_cost: float | None = None,
    packed: bool = False,
    fixed: bool = False,
    shared: bool = True,
    buckets: tuple[int, ...] = (),
) -> BatchPolicy | None:
    """adaptive: the batch rule that prices the rows' drafts on their shared forwards; None
    for the fixed schedules, and every schedule where the rows do not share their forwards
    (`shared` False: a draft with another tokenizer, a sliding-window target): each row then
    plans with a policy of its own (`make_policy`), as it would alone. `draft_cost`:
    make_policy's; `packed`: the target adapter's `packs_rows`; `fixed`: no row joins (the
    call ends with its longest row); `buckets`: the widths the target adapter pads its
    forwards to (`verify_buckets`: each bucket costs its own)."""
    if spec.num_assistant_tokens_schedule != "adaptive" or not shared:
        return None
    policy = BatchAdaptivePolicy(
        rows, max_tokens=spec.num_assistant_tokens, packed=packed, fixed=fixed
    )
    if draft_cost is not None:
        policy.shared.expect_draft_cost(draft_cost)
    if buckets:
        policy.shared.expect_buckets(buckets)
    return policy


def shares_forwards(target: BatchModelAdapter, own_drafters: bool) -> bool:
    """Whether the rows share the target's forwards and the draft's (the batch adaptive
    rule prices those); a batch of single adapters, or of rows that each draft with their
    own drafter (`own_drafters`), runs each row's alone."""
    return not isinstance(target, RowAdapters) and not own_drafters


def check_row_options(
    rows: int, options: CallOptions
) -> tuple[list[Any], BatchPolicy | list[LookaheadPolicy] | None]:
    """A batch's per-row options: `streamer=` a sequence of one streamer (or None) per row,
    `policy=` a BatchPolicy or a sequence of one LookaheadPolicy per row (UnsupportedOptionError
    otherwise, saying what to pass). Returns the streamers and the batch rule or the rows'
    policies (None: the schedule's)."""
    streamer, policy = options.streamer, options.policy
    per_row = f"a list of {rows} (one per row, in row order)"
    if streamer is None:
        streamers: list[Any] = [None] * rows
    elif isinstance(streamer, Sequence) and len(streamer) == rows:
        streamers = list(streamer)
        for one in streamers:
            check_call_arguments(None, one, None)
    else:
        raise UnsupportedOptionError(
            f"streamer= streams one sequence (transformers' streamers take one row), and this "
            f"batch has {rows} rows: pass {per_row} of streamers, None for a row not streamed"
        )
    if policy is None or isinstance(policy, BatchPolicy):
        return streamers, policy
    if isinstance(policy, Sequence) and len(policy) == rows:
        for one in policy:
            check_call_arguments(None, None, one)
        if len({id(one) for one in policy}) < rows:
            raise UnsupportedOptionError(
                "policy=: each row learns on its own: pass a policy object per row"
            )
        return streamers, list(policy)
    raise UnsupportedOptionError(
        "policy= is one policy object, and every row of a batch learns with its own: pass "
        f"{per_row} of policy objects, a BatchPolicy, or num_assistant_tokens_schedule= "
        "(each row gets a fresh policy)"
    )


def draft_texts(
    target: Any, draft: Any, tokenizer: Any, assistant_tokenizer: Any
) -> tuple[Any, Any] | None:
    """(tokenizer, assistant_tokenizer) when `draft` drafts through text (another
    vocabulary; core.validation.text_pair's checks), else None."""
    if draft is None or assistant_tokenizer is None:
        return None
    return text_pair(as_adapter(target), as_adapter(draft), tokenizer, assistant_tokenizer)


@dataclass(frozen=True)
class DraftSources:
    """Where a batch's draft tokens come from: the draft model (as given, and as a batch
    adapter when it shares the target's tokens), prompt lookup, and the tokenizers of a
    draft with another vocabulary (`texts`, drafted by `method`)."""

    draft: Any  # the draft model as the caller gave it (None: none)
    draft_batch: BatchModelAdapter | None  # its batch adapter (None: none, or other tokens)
    lookup: Any  # LookupConfig or None
    texts: tuple[Any, Any] | None = None
    method: str | None = None
    suffix: SuffixScope | None = None  # the suffix cache's scope the rows read (None: none)

    def choose(
        self, vocab_size: int, eos_token_ids: tuple[int, ...]
    ) -> tuple[BatchDrafter | None, Callable[[], Drafter] | None]:
        """How the rows draft: (a `BatchDrafter`, None) where `make_drafter` would choose
        sources whose draft forwards it shares between the rows (`SHARED_FORWARDS`); else
        (None, what makes each row's own drafter: `make_drafter`'s, over a model adapter of
        the row's own), so that a drafter written once for generate() drafts in batches and
        the server too (a draft with another tokenizer, any other); (None, None): the target
        alone."""
        draft, lookup, texts, method, suffix = (
            self.draft,
            self.lookup,
            self.texts,
            self.method,
            self.suffix,
        )
        if texts is None:  # what make_drafter chooses; nothing of it is begun
            chosen = drafters.make_drafter(self.draft_batch, vocab_size, eos_token_ids, lookup,
                                           suffix=suffix)  # fmt: skip
            if chosen is None:
                return None, None
            if type(chosen) in SHARED_FORWARDS:
                shared = BatchDrafter(self.draft_batch, lookup, vocab_size, eos_token_ids, suffix)
                return shared, None

        def make() -> Drafter:
            model = None if draft is None else own_adapter(draft)
            made = drafters.make_drafter(
                model, vocab_size, eos_token_ids, lookup, texts, method, suffix
            )
            assert made is not None, "a draft model or a source is given"
            return made

        return None, make


def check_batch_pair(target: BatchModelAdapter, draft: BatchModelAdapter | None) -> None:
    """IncompatibleModelsError when the draft's vocabulary is another than the target's."""
    if draft is not None and draft.vocab_size != target.vocab_size:
        raise IncompatibleModelsError(
            f"the draft's vocabulary ({draft.vocab_size} tokens) differs from the target's "
            f"({target.vocab_size}): use a draft that shares the target's tokenizer"
        )


def check_cache_memory(
    models: Sequence[BatchModelAdapter | None], rows: int, length: int, available: int | None = None
) -> None:
    """InsufficientMemoryError before a batch starts when the KV caches of `models` (the
    target, the draft or None; bytes per cached token x `rows` x `length` tokens each) need
    more than the memory available (the kernel's MemAvailable, or `available`); skipped where
    the machine does not say."""
    sizes = {
        role: rows * length * model.bytes_per_token()
        for role, model in zip(("the target", "the draft"), models, strict=False)
        if model is not None
    }
    need = sum(sizes.values())
    available = available_bytes() if available is None else available
    if check_skipped() or available is None or need <= available:
        return
    parts = ", ".join(f"{role} {size / 1e9:.2f} GB" for role, size in sizes.items())

    def message(fewer: str, shorter: str) -> str:
        return (
            f"a batch of {rows} rows of up to {length} tokens needs at least {need / 1e9:.2f} GB "
            f"for its KV caches ({parts}), and this machine has "
            f"{available / 1e9:.2f} GB available: {fewer} or {shorter}, close other programs, "
            f"or set {SKIP_ENV}=1 to try anyway"
        )

    raise InsufficientMemoryError(
        message("pass fewer rows", "a smaller max_new_tokens"),
        cli_message=message("use a smaller --batch-size", "--max-new-tokens"),
    )


def _output(
    requests: list[Request], rows: list[Row], width: int, pad: int, wall: float
) -> GenerateOutput:
    """(B, T + new) sequences padded after each row's end; the rows' stats, and all of
    them as one GenerationStats (every row's rounds, the call's wall time)."""
    longest = max(row.length for row in rows)
    sequences = rows[0].tokens.new_full((len(rows), longest), pad)
    for index, (request, row) in enumerate(zip(requests, rows, strict=True)):
        sequences[index, : row.length] = row.committed
        row.stats.wall_time_s = wall
        row.stats.do_sample = request.do_sample
        row.stats.processors = request.processor_names
    stats = GenerationStats(
        prompt_tokens=sum(row.stats.prompt_tokens for row in rows),
        rounds=[record for row in rows for record in row.stats.rounds],
        wall_time_s=wall,
        processors=rows[0].stats.processors,
        do_sample=rows[0].stats.do_sample,
    )
    stats.target_forwards = max(len(row.stats.rounds) for row in rows)
    results = [row.emission.results() if row.emission else (None, None) for row in rows]
    scores, logits = (by_step([result[i] for result in results], pad) for i in (0, 1))
    return GenerateOutput(sequences, stats, scores, logits, tuple(row.stats for row in rows))


def by_step(
    per_row: list[tuple[torch.Tensor, ...] | None], pad: int
) -> tuple[torch.Tensor, ...] | None:
    """Each row's (1, V) rows per new token -> one (B, V) tensor per step, as transformers
    returns a batch's scores; a row that has ended: a point mass on `pad` (module docstring).
    None where they were not asked for."""
    if any(steps is None for steps in per_row):
        return None
    going = [steps for steps in per_row if steps]
    if not going:
        return ()
    ended = torch.full_like(going[0][0], float("-inf"))
    ended[0, pad] = 0.0
    count = max(len(steps) for steps in going)
    return tuple(
        torch.cat([steps[i] if i < len(steps) else ended for steps in per_row])
        for i in range(count)
    )
