"""Draft sources behind one seam (`dynaspec.core.protocols.Drafter`): a draft model, prompt
lookup, or both (the hybrid); `make_drafter` picks one from generate()'s arguments."""

from __future__ import annotations

from dynaspec.core.protocols import Drafter, ModelAdapter
from dynaspec.drafters.draft_model import ModelDrafter
from dynaspec.drafters.hybrid import HybridDrafter
from dynaspec.drafters.prompt_lookup import LookupConfig, PromptLookupDrafter
from dynaspec.errors import ConfigError

__all__ = ["HybridDrafter", "LookupConfig", "ModelDrafter", "PromptLookupDrafter", "make_drafter"]


def make_drafter(
    draft: ModelAdapter | None,
    vocab_size: int,
    eos_token_ids: tuple[int, ...],
    prompt_lookup_num_tokens: int | None = None,
    max_matching_ngram_size: int | None = None,
) -> Drafter | None:
    """The draft source for generate(): the draft model, prompt lookup (when
    `prompt_lookup_num_tokens` is given), both (the hybrid), or None (the target alone)."""
    model = ModelDrafter(draft) if draft is not None else None
    if prompt_lookup_num_tokens is None:
        if max_matching_ngram_size is not None:
            raise ConfigError(
                "max_matching_ngram_size only acts with prompt lookup: pass "
                "prompt_lookup_num_tokens too (e.g. 10)"
            )
        return model
    ngram = 2 if max_matching_ngram_size is None else max_matching_ngram_size
    config = LookupConfig(prompt_lookup_num_tokens, ngram)
    lookup = PromptLookupDrafter(config, vocab_size, eos_token_ids)
    return lookup if model is None else HybridDrafter(model, lookup)
