"""The public entry: `dynaspec.generate` types the caller's arguments (transformers' names),
builds the sequence's one Request from them (dynaspec/request.py) and hands it to the loop in
`dynaspec.core`; input_ids of several rows go to batch.py, a Request per row."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from dynaspec.batch import generate_batch, is_batch
from dynaspec.compat.settings import GenerationKwargs
from dynaspec.core.config import DEFAULT_SCHEDULE, SpecConfig
from dynaspec.core.loop import GenerateOutput, decode
from dynaspec.core.protocols import LookaheadPolicy, ModelAdapter
from dynaspec.core.request import Request
from dynaspec.core.sharing import holding, outside_inference_mode
from dynaspec.drafters.suffix_cache import SuffixCache, SuffixScope
from dynaspec.request import CallOptions, sequence_request

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
    options = CallOptions(
        spec=SpecConfig(
            num_assistant_tokens, assistant_confidence_threshold, num_assistant_tokens_schedule
        ),
        seed=seed,
        seed_mode=seed_mode,
        streamer=streamer,
        policy=policy,
        prompt_lookup_num_tokens=prompt_lookup_num_tokens,
        max_matching_ngram_size=max_matching_ngram_size,
        generation_config=generation_config,
        logits_processor=logits_processor,
        stopping_criteria=stopping_criteria,
        tokenizer=tokenizer,
        assistant_tokenizer=assistant_tokenizer,
        cross_tokenizer=cross_tokenizer,
        suffix_cache=suffix_cache,
        keywords=kwargs,
    )
    if is_batch(input_ids):  # (B, T), B > 1: dynaspec/batch.py, a Request per row
        return generate_batch(target, draft, input_ids, attention_mask, options, started)
    request, models = sequence_request(target, draft, input_ids, attention_mask, options, started)
    with holding(target, draft), torch.inference_mode():  # one call at a time per adapter
        output = _decode(models.target, request)
    suffix = options.suffix()
    if suffix is not None:  # what this call saw drafts the next ones
        suffix.add(output.sequences[0].tolist())
    return outside_inference_mode(output)  # the caller's own tensors, as transformers' are


def _decode(target: ModelAdapter, request: Request) -> GenerateOutput:
    """The loop over one Request; its stats name its processors and sampling."""
    output = decode(
        target,
        request.drafter,
        request.prompt,
        request.policy,
        request.sampler,
        request.limits,
        request.streamer,
        request.emission,
    )
    output.stats.processors = request.processor_names
    output.stats.do_sample = request.do_sample
    return output
