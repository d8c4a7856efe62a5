"""The public entry: `dynaspec.generate` builds the policy and the draft source from the
caller's arguments (transformers' names) and hands them to the loop in `dynaspec.core`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from dynaspec.backends import as_adapter
from dynaspec.backends.graphs import verify_buckets
from dynaspec.backends.weights import draft_cost_ratio
from dynaspec.batch import BATCH_OPTIONS, generate_batch, is_batch
from dynaspec.compat.processing import build_stopping, full_processor_list, short_name
from dynaspec.compat.settings import GenerationKwargs, resolve_settings
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
from dynaspec.core.config import DEFAULT_SCHEDULE, SpecConfig
from dynaspec.core.emission import Emission
from dynaspec.core.loop import GenerateOutput, decode
from dynaspec.core.protocols import LookaheadPolicy
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.sharing import holding, outside_inference_mode, separate_draft
from dynaspec.drafters import lookup_config, make_drafter
from dynaspec.drafters.suffix_cache import SuffixCache, SuffixScope, as_scope
from dynaspec.policies import make_policy

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["GenerateOutput", "GenerationKwargs", "generate"]


def generate(
    target: Any,
    draft: Any,
    input_ids: torch.Tensor,
    *,
    num_assistant_tokens: int = 20,
    assistant_confidence_threshold: float = 0.4,
    num_assistant_tokens_schedule: str = DEFAULT_SCHEDULE,
    seed: int | None = None,
    seed_mode: str = "keyed",
    streamer: Any = None,
    policy: LookaheadPolicy | None = None,
    prompt_lookup_num_tokens: int | None = None,
    max_matching_ngram_size: int | None = None,
    generation_config: Any = None,
    logits_processor: Sequence[Any] | None = None,
    stopping_criteria: Sequence[Any] | None = None,
    tokenizer: Any = None,
    assistant_tokenizer: Any = None,
    cross_tokenizer: str = "auto",
    attention_mask: torch.Tensor | None = None,
    suffix_cache: SuffixCache | SuffixScope | None = None,
    **kwargs: Unpack[GenerationKwargs],
) -> GenerateOutput:
    """Generates up to `max_new_tokens` tokens (default 128) with `target`, drafted by `draft`.

    The output is exactly the target's own: greedy output equals `target.generate(input_ids,
    ...)` with the same settings token for token, and sampled output follows the target's
    processed distribution (speculative sampling; a seed fixes it: docs/usage.md, "Seeds").

    `kwargs` are transformers' generation keywords with transformers' meaning (listed in
    `GenerationKwargs`: max_new_tokens, do_sample, temperature, top_k, top_p, min_p,
    repetition_penalty, no_repeat_ngram_size, stop_strings, max_time, output_scores, ...).
    The target's generation_config applies where the call is silent (see compat/settings.py);
    `generation_config=` replaces it (`GenerationConfig()`: a clean slate). `logits_processor`
    and `stopping_criteria` take transformers' objects; stop strings need `tokenizer`.
    The default schedule "adaptive" drafts only while its measured costs say drafting pays;
    "dynamic" is the published confidence rule, transformers' default. `policy`: a policy
    object the caller owns, not reset: what it learned carries over between calls.
    `prompt_lookup_num_tokens` turns on prompt lookup (n-grams up to `max_matching_ngram_size`,
    default 2), alone with `draft=None`, else with the draft model (a hybrid): the most tokens
    copied per round (adaptive copies what pays, so 32 suits it; the fixed schedules copy the
    whole match, as transformers does, whose usual is 10). `input_ids` (B, T) with its
    `attention_mask`, left-padded: a batch, each row as alone (batch.py: a list of streamers).
    Bare models are paired by vocabulary size; load_pair checks token lists (docs/models.md).
    With `tokenizer` and `assistant_tokenizer` (the draft's), a draft of another vocabulary
    drafts by `cross_tokenizer`: "string" (through text, greedy only, as transformers' UAG),
    "intersection" (the shared tokens; sampling too), "auto": intersection when sampling.
    `suffix_cache` (a `dynaspec.SuffixCache`, or one scope of it, `.scope(key)`): copies also
    from what earlier calls' texts went on with; each call adds its prompt and output to it.
    """
    started = time.time()  # max_time counts from here, as transformers' MaxTimeCriteria
    spec = SpecConfig(num_assistant_tokens, assistant_confidence_threshold,
                      num_assistant_tokens_schedule)  # fmt: skip
    if is_batch(input_ids):  # (B, T), B > 1: dynaspec/batch.py checks the per-row options
        check_call_arguments(seed, None, None)
        own = {k: v for k, v in locals().items() if k in BATCH_OPTIONS}
        return generate_batch(target, draft, input_ids, attention_mask, spec, own, kwargs)
    check_call_arguments(seed, streamer, policy)
    prompt = check_prompt(input_ids)
    target_adapter, draft_adapter, texts = _checked_adapters(
        target, draft, prompt, attention_mask, (tokenizer, assistant_tokenizer)
    )
    input_length = 1 if target_adapter.is_encoder_decoder else prompt.shape[1]
    settings = resolve_settings(kwargs, target, generation_config, input_length, seed,
                                target_adapter.vocab_size, seed_mode)  # fmt: skip
    lookup = lookup_config(prompt_lookup_num_tokens, max_matching_ngram_size, spec)
    method = _check_settings(target_adapter, draft_adapter, texts, prompt, settings,
                             cross_tokenizer)  # fmt: skip
    fresh = make_policy(spec, draft_cost_ratio(target, draft), verify_buckets(target))
    policy = fresh if policy is None else policy
    sampler = _sampler(settings, logits_processor, prompt, target_adapter, input_length)
    criteria = build_stopping(settings.limits, tokenizer, stopping_criteria, started)
    emission = Emission.needed(criteria, settings.outputs)
    with holding(target, draft), torch.inference_mode():  # one call at a time per adapter
        output = _decode(target_adapter, draft_adapter, prompt, policy, sampler, settings,
                         streamer, emission, (lookup, texts, method, suffix_cache))  # fmt: skip
    output.stats.processors = tuple(short_name(p) for p in [*sampler.processors, *criteria])
    output.stats.do_sample = settings.sampling.do_sample
    return outside_inference_mode(output)  # the caller's own tensors, as transformers' are


def _decode(
    target: Any,
    draft: Any,
    prompt: torch.Tensor,
    policy: LookaheadPolicy,
    sampler: TokenSampler,
    settings: Any,
    streamer: Any,
    emission: Emission,
    sources: tuple[Any, Any, str | None, SuffixCache | SuffixScope | None],
) -> GenerateOutput:
    """The loop over the draft sources: prompt lookup's config, the tokenizers and method of
    a draft of another vocabulary, the suffix cache (which takes the call's text after it)."""
    lookup, texts, method, suffix_cache = sources
    suffix = as_scope(suffix_cache)
    eos = settings.limits.eos_token_ids
    drafter = make_drafter(draft, target.vocab_size, eos, lookup, texts, method, suffix)
    output = decode(target, drafter, prompt, policy, sampler, settings.limits, streamer, emission)
    if suffix is not None:  # what this call saw drafts the next ones
        suffix.add(output.sequences[0].tolist())
    return output


def _sampler(
    settings: Any, custom: Any, prompt: torch.Tensor, target: Any, input_length: int
) -> TokenSampler:
    """The processors in transformers' order, and a sampler over them; each model samples
    with a generator on its own device, the target's seeded with `seed`. Processors run
    where the target's logits and the committed tokens live."""
    prompt = prompt.to(getattr(target, "device", prompt.device))
    processors = full_processor_list(
        settings.sampling, settings.processors, custom, prompt, input_length, settings.limits
    )
    sampling = settings.sampling.for_row(0)  # a seed list of one: its seed
    return TokenSampler(sampling, device=prompt.device, processors=processors)


def _check_settings(
    target: Any,
    draft: Any,
    texts: tuple[Any, Any] | None,
    prompt: torch.Tensor,
    settings: Any,
    cross_tokenizer: str,
) -> str | None:
    """The checks that need the settings: the lengths (a draft with another tokenizer counts
    its own tokens, and stops drafting at its context's end) and what such a draft does not
    do. Returns how such a draft drafts (None: there is none)."""
    method = check_text_options(texts, settings.sampling.do_sample, cross_tokenizer)
    models = [target] + ([draft] if draft is not None and texts is None else [])
    check_lengths(models, prompt.shape[1], settings.limits.max_new_tokens)
    return method


def _checked_adapters(
    target: Any,
    draft: Any,
    prompt: torch.Tensor,
    attention_mask: torch.Tensor | None,
    tokenizers: tuple[Any, Any],
) -> tuple[Any, Any, tuple[Any, Any] | None]:
    """The two models as adapters after the checks that need no settings, and the two
    tokenizers when the draft drafts through text (another vocabulary), else None."""
    check_attention_mask(attention_mask, prompt)
    target_adapter = as_adapter(target)
    draft_adapter = as_adapter(draft) if draft is not None else None
    draft_adapter = separate_draft(target_adapter, draft_adapter)  # target is draft: a fork
    texts = text_pair(target_adapter, draft_adapter, *tokenizers)
    if texts is None:
        check_pair(target_adapter, draft_adapter)
    check_token_ids(prompt, target_adapter.vocab_size)
    return target_adapter, draft_adapter, texts
