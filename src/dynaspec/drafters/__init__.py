"""Draft sources behind one seam (`dynaspec.core.protocols.Drafter`): a draft model, prompt
lookup, or both (the hybrid), or a draft model with another tokenizer (through text);
`make_drafter` picks one from generate()'s arguments."""

from __future__ import annotations

from typing import Any

from dynaspec.core.config import SpecConfig
from dynaspec.core.protocols import Drafter, ModelAdapter
from dynaspec.drafters.cross_tokenizer import CrossTokenizerDrafter, draft_eos_ids
from dynaspec.drafters.draft_model import ModelDrafter
from dynaspec.drafters.hybrid import HybridDrafter
from dynaspec.drafters.intersection import IntersectionDrafter
from dynaspec.drafters.prompt_lookup import LookupConfig, PromptLookupDrafter, match_for
from dynaspec.drafters.shared_vocab import shared_vocabulary
from dynaspec.drafters.suffix_cache import SuffixCache, SuffixScope
from dynaspec.errors import ConfigError

__all__ = [
    "CrossTokenizerDrafter",
    "HybridDrafter",
    "IntersectionDrafter",
    "LookupConfig",
    "ModelDrafter",
    "PromptLookupDrafter",
    "SuffixCache",
    "SuffixScope",
    "lookup_config",
    "make_drafter",
]


def lookup_config(
    prompt_lookup_num_tokens: int | None,
    max_matching_ngram_size: int | None,
    spec: SpecConfig | None = None,
) -> LookupConfig | None:
    """generate()'s prompt-lookup keywords as a config (None: no prompt lookup). Under
    `spec`'s schedule: transformers' fixed ones copy from transformers' occurrence (the
    leftmost: the same rounds as transformers); "adaptive" (the default), whose copy rule
    prices a copy by its agreement, from the occurrence that agrees furthest back."""
    if prompt_lookup_num_tokens is None:
        if max_matching_ngram_size is not None:
            raise ConfigError(
                "max_matching_ngram_size only acts with prompt lookup: pass "
                "prompt_lookup_num_tokens too (e.g. 10)"
            )
        return None
    ngram = 2 if max_matching_ngram_size is None else max_matching_ngram_size
    match = match_for((spec or SpecConfig()).num_assistant_tokens_schedule)
    return LookupConfig(prompt_lookup_num_tokens, ngram, match)


def make_drafter(
    draft: ModelAdapter | None,
    vocab_size: int,
    eos_token_ids: tuple[int, ...],
    lookup: LookupConfig | None = None,
    texts: tuple[Any, Any] | None = None,
    cross_tokenizer: str | None = "string",
    suffix: SuffixScope | None = None,
) -> Drafter | None:
    """The draft source for generate(): the draft model, prompt lookup (with a `lookup`
    config), both (the hybrid), or None (the target alone). With `texts`, the target's and
    the draft's tokenizers, the draft model drafts through text (`cross_tokenizer`
    "string") or over the tokens both share ("intersection"), with prompt lookup or not.
    With `suffix`, a scope of a suffix cache, the suffix cache is a third source (the
    hybrid's, drafters/suffix.py)."""
    model: ModelDrafter | CrossTokenizerDrafter | None = None
    if texts is not None and draft is not None:
        draft_eos = draft_eos_ids(texts[1], draft)
        if cross_tokenizer == "intersection":
            shared = shared_vocabulary(*texts, vocab_size, (eos_token_ids, draft_eos))
            model = IntersectionDrafter(draft, texts[0], texts[1], shared, draft_eos)
        else:
            model = CrossTokenizerDrafter(draft, texts[0], texts[1], draft_eos)
    elif draft is not None:
        model = ModelDrafter(draft)
    copier = None if lookup is None else PromptLookupDrafter(lookup, vocab_size, eos_token_ids)
    if suffix is not None:
        return HybridDrafter(model, copier, suffix, vocab_size, eos_token_ids)
    if copier is None:
        return model
    return copier if model is None else HybridDrafter(model, copier)
