"""One test per cache API HFAdapter supports, each on a tiny model and checked for equality.

* transformers 5.x forward signature: `cache=` in, `out.cache` out, a DynamicCache
  rolled back with `crop(-n)`; `logits_to_keep` limits the logits computed.
* the older signature: `past_key_values=` in and out, no `logits_to_keep`. A wrapper with
  that signature stands in for such a model (HFAdapter picks the keyword by signature).
"""

from __future__ import annotations

from typing import Any

import torch
from tiny_models import CacheCheckStreamer, hf_greedy, noisy_copy, tiny_model
from transformers import DynamicCache

import dynaspec
from dynaspec.backends.hf import HFAdapter

PROMPT = torch.tensor([[3, 1, 4, 1, 5]])
MAX_NEW_TOKENS = 10


class PastKeyValuesModel(torch.nn.Module):
    """Wraps a transformers model behind the older `past_key_values=` forward signature."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.config = model.config
        self.generation_config = model.generation_config
        self.seen_caches: list[Any] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        past_key_values: Any = None,
        use_cache: bool = True,
        **kwargs: Any,
    ) -> Any:
        assert "cache" not in kwargs and "logits_to_keep" not in kwargs, kwargs
        self.seen_caches.append(past_key_values)
        out = self.model(input_ids=input_ids, cache=past_key_values, use_cache=use_cache)
        return _LegacyOutput(logits=out.logits, past_key_values=out.cache)


class _LegacyOutput:
    """An output with `past_key_values` and no `cache` attribute, as older releases return."""

    def __init__(self, logits: torch.Tensor, past_key_values: Any) -> None:
        self.logits = logits  # (1, T, V): logits for every fed token
        self.past_key_values = past_key_values


def run_and_check(target: Any, draft: Any, reference_model: Any) -> tuple[HFAdapter, HFAdapter]:
    target_adapter, draft_adapter = HFAdapter(target), HFAdapter(draft)
    streamer = CacheCheckStreamer(target_adapter, draft_adapter)
    out = dynaspec.generate(
        target_adapter,
        draft_adapter,
        PROMPT,
        max_new_tokens=MAX_NEW_TOKENS,
        num_assistant_tokens=4,
        num_assistant_tokens_schedule="constant",
        streamer=streamer,
    )
    assert out.sequences.tolist() == hf_greedy(reference_model, PROMPT, MAX_NEW_TOKENS).tolist()
    # Rejections happened, so the caches really were rolled back.
    assert any(r.num_accepted < r.num_drafted for r in out.stats.rounds)
    length = out.sequences.shape[1]
    for adapter in (target_adapter, draft_adapter):
        assert isinstance(adapter.cache, DynamicCache)
        assert adapter.cache.get_seq_length() == adapter.num_cached
    assert target_adapter.num_cached == length - 1
    return target_adapter, draft_adapter


def test_dynamic_cache_through_the_cache_keyword() -> None:
    target = tiny_model("llama", seed=0, vocab_size=64)
    draft = noisy_copy(target, scale=0.2, seed=3)
    calls: list[dict[str, Any]] = []

    def record(module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        calls.append(dict(kwargs))

    handle = target.register_forward_pre_hook(record, with_kwargs=True)
    try:
        run_and_check(target, draft, target)
    finally:
        handle.remove()
    assert calls and all("past_key_values" not in kwargs for kwargs in calls)
    assert calls[0]["cache"] is None
    assert all(isinstance(kwargs["cache"], DynamicCache) for kwargs in calls[1:])
    # Only the logits the loop needs are computed: one per drafted token, plus one.
    assert all(kwargs["logits_to_keep"] <= 5 for kwargs in calls)


def test_past_key_values_keyword_of_older_releases() -> None:
    inner_target = tiny_model("gpt2", seed=0, vocab_size=64)
    target = PastKeyValuesModel(inner_target)
    draft = PastKeyValuesModel(noisy_copy(inner_target, scale=0.2, seed=3))
    run_and_check(target, draft, inner_target)
    # forward() asserts it never gets `cache=` or `logits_to_keep`. The first forward starts
    # without a cache; every later one gets the rolled-back DynamicCache.
    assert target.seen_caches[0] is None
    assert all(isinstance(cache, DynamicCache) for cache in target.seen_caches[1:])
