"""Building a Request (core/request.py): a call's arguments, typed and checked, and each of
its sequences' Request, built in one place for every entry point.

    options = CallOptions(spec, seed=..., keywords={...})     generate()'s own keywords, typed
    call    = resolve_call(target, options, input_length, vocab_size, started)
                                                              what the call's rows share: the
                                                              settings, the stopping criteria
    request = make_request(call, prompt, pads=..., row=...)   one sequence: its processors,
                                                              sampler, stopping, (drafter, policy)

`generate` builds its one Request with `sequence_request` (the checks of a sequence alone,
then the two steps above, then its drafter and policy); a batch (batch.py) resolves its call
once and makes a Request per row; `ContinuousBatch.make_request` (so the server) one per
joining row; the vLLM proposers one per request they draft for (`proposer_request`). Checks
raise typed errors (dynaspec.errors) whose message says the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import dynaspec.drafters as drafters
from dynaspec.backends import as_adapter
from dynaspec.backends.graphs import verify_buckets
from dynaspec.backends.weights import draft_cost_ratio
from dynaspec.compat.processing import build_stopping, full_processor_list, short_name
from dynaspec.compat.settings import GenerationSettings, resolve_settings
from dynaspec.compat.validation import (
    check_attention_mask,
    check_call_arguments,
    check_lengths,
    check_pair,
    check_prompt,
    check_text_options,
    check_token_ids,
    text_pair,
)
from dynaspec.core.config import LimitsConfig, SpecConfig
from dynaspec.core.emission import Emission
from dynaspec.core.protocols import Drafter, LookaheadPolicy, ModelAdapter
from dynaspec.core.request import Request
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.sharing import separate_draft
from dynaspec.drafters import LookupConfig, lookup_config
from dynaspec.drafters.suffix_cache import SuffixCache, SuffixScope, as_scope
from dynaspec.policies import make_policy


@dataclass(frozen=True)
class CallOptions:
    """generate()'s own keywords, beside the models, input_ids and attention_mask, with
    transformers' generation keywords in `keywords`: what a call hands to its Requests."""

    spec: SpecConfig = field(default_factory=SpecConfig)  # how far to draft, by which schedule
    seed: int | Sequence[int] | None = None  # seeds sampling; a batch: one, or one per row
    seed_mode: str = "keyed"  # what the seed means (compat/records.py's SamplingConfig)
    streamer: Any = None  # receives the tokens as they come (put / end); a batch: one per row
    policy: Any = None  # the caller's policy object, not reset; a batch: one per row, or a
    #                     BatchPolicy (batch.py's check_row_options)
    prompt_lookup_num_tokens: int | None = None  # prompt lookup's most copied tokens
    max_matching_ngram_size: int | None = None  # its longest n-gram (default 2)
    generation_config: Any = None  # replaces the target's generation_config
    logits_processor: Sequence[Any] | None = None  # the caller's processor objects
    stopping_criteria: Sequence[Any] | None = None  # the caller's criteria objects
    tokenizer: Any = None  # the target's (stop strings; a draft with another tokenizer)
    assistant_tokenizer: Any = None  # the draft's, when it is another
    cross_tokenizer: str = "auto"  # how a draft with another tokenizer drafts
    suffix_cache: SuffixCache | SuffixScope | None = None  # copies from earlier calls' texts
    keywords: Mapping[str, Any] = field(default_factory=dict)  # transformers' keywords

    def __post_init__(self) -> None:
        check_call_arguments(self.seed, None, None)  # the streamer and policy: per row

    def lookup(self) -> LookupConfig | None:
        """The prompt-lookup config under the spec's schedule (None: no prompt lookup)."""
        return lookup_config(self.prompt_lookup_num_tokens, self.max_matching_ngram_size, self.spec)

    def suffix(self) -> SuffixScope | None:
        """The suffix cache's scope this call drafts from and adds its text to (None: none)."""
        return as_scope(self.suffix_cache)


@dataclass(frozen=True)
class Call:
    """What every sequence of one call shares."""

    options: CallOptions
    settings: GenerationSettings  # the keywords resolved against the generation_config
    criteria: tuple[Any, ...]  # max_time (from the call's start), stop strings, the caller's


def resolve_call(
    model: Any, options: CallOptions, input_length: int, vocab_size: int, started: float
) -> Call:
    """The call's settings (`options.keywords` over the generation_config, else `model`'s)
    and its stopping criteria. input_length: tokens the decoder starts from (the prompt's
    width; 1 for encoder-decoder models); vocab_size: the target's, token ids lie below it;
    started: time.time() at the call's start, from which max_time counts."""
    settings = resolve_settings(
        options.keywords,
        model,
        options.generation_config,
        input_length,
        options.seed,
        vocab_size,
        options.seed_mode,
    )
    criteria = build_stopping(
        settings.limits, options.tokenizer, options.stopping_criteria, started
    )
    return Call(options, settings, tuple(criteria))


def make_request(
    call: Call,
    prompt: torch.Tensor,
    *,
    pads: int = 0,
    row: int = 0,
    rows: int = 1,
    device: torch.device | str | None = None,
    input_length: int | None = None,
    drafter: Drafter | None = None,
    policy: LookaheadPolicy | None = None,
    streamer: Any = None,
) -> Request:
    """One sequence's Request. prompt: (1, T), its first `pads` tokens left padding (a batch
    row); row: its index in a batch (row i > 0 samples from a seed of its own); device:
    where its processors and sampler's seeded generator live (default the prompt's);
    input_length: as resolve_call's (default T); streamer: its own (put / end)."""
    settings = call.settings
    device = prompt.device if device is None else torch.device(device)
    width = prompt.shape[1] if input_length is None else input_length
    processors = full_processor_list(
        settings.sampling,
        settings.processors,
        call.options.logits_processor,
        prompt.to(device),
        width,
        settings.limits,
        pads,
    )
    sampling = settings.sampling.for_row(row, rows)
    sampler = TokenSampler(sampling, device=device, processors=processors, offset=pads)
    return Request(
        prompt=prompt,
        pads=pads,
        limits=settings.limits,
        sampler=sampler,
        criteria=call.criteria,
        emission=Emission.needed(call.criteria, settings.outputs),
        processor_names=tuple(short_name(p) for p in [*sampler.processors, *call.criteria]),
        drafter=drafter,
        policy=policy,
        streamer=streamer,
    )


def drafting_request(
    tokens: torch.Tensor,
    sampler: TokenSampler,
    drafter: Drafter | None,
    policy: LookaheadPolicy,
    eos_token_ids: tuple[int, ...] = (),
) -> Request:
    """The Request of a sequence another engine decodes (a vLLM proposer's): the engine
    samples, verifies and stops it, dynaspec drafts for it. tokens: (T,) its committed tokens
    when first seen; sampler: the proposer's; its limits are the engine's, only the EOS ids
    (copies end before them) are dynaspec's."""
    return Request(
        prompt=tokens.view(1, -1),
        pads=0,
        limits=LimitsConfig(eos_token_ids=eos_token_ids),
        sampler=sampler,
        criteria=(),
        emission=None,
        processor_names=(),
        drafter=drafter,
        policy=policy,
    )


@dataclass(frozen=True)
class Models:
    """A sequence's models as adapters, checked as a pair."""

    target: ModelAdapter
    draft: ModelAdapter | None  # a fork of the target when both are one model
    texts: tuple[Any, Any] | None  # both tokenizers when the draft drafts through text


def sequence_request(
    target: Any,
    draft: Any,
    input_ids: Any,
    attention_mask: Any,
    options: CallOptions,
    started: float,
) -> tuple[Request, Models]:
    """generate()'s one sequence: every check of its prompt, models and settings, in one
    pass, then its Request with its drafter and policy; and its models as adapters."""
    check_call_arguments(None, options.streamer, options.policy)
    prompt = check_prompt(input_ids)  # (1, T)
    check_attention_mask(attention_mask, prompt)
    models = _checked_models(target, draft, options)
    check_token_ids(prompt, models.target.vocab_size)
    input_length = 1 if models.target.is_encoder_decoder else prompt.shape[1]
    call = resolve_call(target, options, input_length, models.target.vocab_size, started)
    limits = call.settings.limits
    lookup = options.lookup()
    do_sample = call.settings.sampling.do_sample
    method = check_text_options(models.texts, do_sample, options.cross_tokenizer)
    _check_lengths(models, prompt, limits)
    fresh = make_policy(options.spec, draft_cost_ratio(target, draft), verify_buckets(target))
    vocab, eos = models.target.vocab_size, limits.eos_token_ids
    suffix = options.suffix()
    drafter = drafters.make_drafter(models.draft, vocab, eos, lookup, models.texts, method, suffix)
    request = make_request(
        call,
        prompt,
        device=getattr(models.target, "device", prompt.device),
        input_length=input_length,
        drafter=drafter,
        policy=fresh if options.policy is None else options.policy,
        streamer=options.streamer,
    )
    return request, models


def _checked_models(target: Any, draft: Any, options: CallOptions) -> Models:
    """The two models as adapters, and the tokenizers when the draft drafts through text
    (another vocabulary); IncompatibleModelsError for a pair that cannot work."""
    target_adapter = as_adapter(target)
    draft_adapter = as_adapter(draft) if draft is not None else None
    draft_adapter = separate_draft(target_adapter, draft_adapter)  # target is draft: a fork
    texts = text_pair(target_adapter, draft_adapter, options.tokenizer, options.assistant_tokenizer)
    if texts is None:
        check_pair(target_adapter, draft_adapter)
    return Models(target_adapter, draft_adapter, texts)


def _check_lengths(models: Models, prompt: torch.Tensor, limits: LimitsConfig) -> None:
    """The prompt and its new tokens fit every model's context (a draft with another
    tokenizer counts its own tokens, and stops drafting at its context's end)."""
    alone = models.draft is not None and models.texts is None  # counts the target's tokens
    adapters = [models.target] + ([models.draft] if alone else [])
    check_lengths(adapters, prompt.shape[1], limits.max_new_tokens)
