"""The suffix cache in dynaspec's vLLM proposers, without vLLM (the simulated engine of
vllm_sim.py): a request copies what earlier requests' texts went on with, every output stays
the target's own; requests' texts are stored when they leave the batch; keyed seeds are
refused inside vLLM with the alternative named."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dynaspec.drafters.suffix_cache import SuffixCache
from dynaspec.errors import ConfigError, UnsupportedOptionError
from dynaspec.integrations.vllm import LookupProposer, ProposerSettings, RequestTracker
from tests.vllm_sim import Chaos, SimEngine, alone

VOCAB = 1000
PROMPT = [5, 17, 256, 3, 999, 42, 7, 11]


def wandering_target(tokens: list[int]) -> int:
    """A greedy 'model' whose text does not repeat within a request (its next token depends
    on the position too), so prompt lookup finds little; two requests with one prompt still
    get one text."""
    a, b = tokens[-2], tokens[-1]
    return (a * 31 + b * 17 + len(tokens) * 101 + 7) % VOCAB


def proposer(cache: SuffixCache | None, schedule: str = "adaptive") -> LookupProposer:
    settings = ProposerSettings(num_speculative_tokens=8, vocab_size=VOCAB, schedule=schedule)
    return LookupProposer(settings=settings, suffix_cache=cache)


def two_turns(cache: SuffixCache | None, schedule: str = "adaptive", chaos=None):
    """The same prompt twice, the second after the first has left; (first, second, proposer)."""
    drafting = proposer(cache, schedule)
    engine = SimEngine(drafting, wandering_target, max_num_seqs=2, k=8, chaos=chaos, seed=4)
    first = engine.add(PROMPT, 48)
    engine.run()
    second = engine.add(PROMPT, 48)
    engine.run()
    for request in (first, second):
        assert request.out[:48] == alone(wandering_target, PROMPT, 48)
    return first, second, drafting


@pytest.mark.parametrize("schedule", ["adaptive", "constant"])
def test_a_request_copies_what_an_earlier_one_went_on_with(schedule):
    first, second, drafting = two_turns(SuffixCache(1), schedule)
    assert drafting.stats.copied["suffix"] > 0 and drafting.stats.stored == 1
    assert second.accepted >= 30 > first.accepted
    _, without, plain = two_turns(None, schedule)  # the control: no cache, no such copies
    assert plain.stats.copied["suffix"] == 0 and without.accepted < 10


def test_lossless_with_the_cache_under_chaos():
    cache = SuffixCache(1)
    drafting = proposer(cache)
    chaos = Chaos(swap=0.5, preempt=0.15, cut=0.3, away_steps=3)
    engine = SimEngine(drafting, wandering_target, max_num_seqs=3, k=8, chaos=chaos, seed=2)
    prompts = [PROMPT, PROMPT[:6] + [1, 2], PROMPT, [9, 9, *PROMPT]]
    requests = [engine.add(p, 40, prefill_chunks=1 + i % 2) for i, p in enumerate(prompts)]
    engine.run()
    requests += [engine.add(p, 40) for p in prompts]
    engine.run()
    for request in requests:
        assert request.out[:40] == alone(wandering_target, request.prompt, 40)
    assert drafting.stats.copied["suffix"] > 0
    assert cache.nbytes() > 0


def test_the_tracker_hands_on_each_request_that_left_with_its_text():
    tracker = RequestTracker(keep_texts=True)
    token_ids = np.array([[1, 2, 3, 4, 0, 0], [7, 8, 9, 0, 0, 0]], dtype=np.int32)
    rows = tracker.rows([[4], [9]], np.array([4, 3]), token_ids)
    for row in rows:
        tracker.file(row, None)
    assert tracker.left == []
    token_ids[1, 3] = 5  # the second goes on, the first has left
    (row,) = tracker.rows([[5]], np.array([4]), token_ids[1:])
    assert not row.new and [r.text for r in tracker.left] == [[1, 2, 3, 4]]
    tracker.file(row, None)
    tracker.rows([], np.array([], dtype=np.int64), token_ids[:0])  # nobody: it left too
    assert [r.text for r in tracker.left] == [[7, 8, 9, 5]]
    assert RequestTracker().rows([[4]], np.array([4]), token_ids[:1])[0].request.text == []


def _vllm_config():
    return SimpleNamespace(
        speculative_config=SimpleNamespace(num_speculative_tokens=4),
        model_config=SimpleNamespace(hf_config=SimpleNamespace(eos_token_id=2, vocab_size=50)),
    )


def test_the_cache_comes_from_the_environment():
    env = {"DYNASPEC_VLLM_SUFFIX_CACHE": "8"}
    drafting = LookupProposer(settings=ProposerSettings.from_vllm(_vllm_config(), env))
    assert drafting.suffix_cache is not None and drafting.suffix_cache.size_mb == 8
    assert (
        LookupProposer(settings=ProposerSettings.from_vllm(_vllm_config(), {})).suffix_cache is None
    )


@pytest.mark.parametrize(
    "env, error, words",
    [
        ({"DYNASPEC_VLLM_SUFFIX_CACHE": "-1"}, ConfigError, "DYNASPEC_VLLM_SUFFIX_CACHE"),
        ({"DYNASPEC_VLLM_SUFFIX_CACHE": "big"}, ConfigError, "DYNASPEC_VLLM_SUFFIX_CACHE"),
        ({"DYNASPEC_VLLM_SEED_MODE": "keyed"}, UnsupportedOptionError, "dynaspec serve"),
        ({"DYNASPEC_VLLM_SEED_MODE": "gumbel"}, ConfigError, "'stream'"),
    ],
)
def test_bad_settings_are_refused_by_name(env, error, words):
    with pytest.raises(error, match=words):
        ProposerSettings.from_vllm(_vllm_config(), env)
    assert ProposerSettings.from_vllm(_vllm_config(), {"DYNASPEC_VLLM_SEED_MODE": "stream"})


def test_the_draft_model_proposer_copies_from_the_cache_too():
    import torch

    from dynaspec.integrations.vllm import DraftModelProposer
    from dynaspec.models.tiny import tiny_pair

    model, draft, _ = tiny_pair()

    @torch.no_grad()
    def target(tokens: list[int]) -> int:
        return int(model(torch.tensor([tokens])).logits[0, -1].argmax())

    settings = ProposerSettings(num_speculative_tokens=6, vocab_size=257)
    drafting = DraftModelProposer(settings=settings, model=draft, suffix_cache=SuffixCache(1))
    engine = SimEngine(drafting, target, max_num_seqs=2, k=6, seed=1)
    prompt = list(b"def f(x):")
    requests = [engine.add(prompt, 24)]
    engine.run()
    requests.append(engine.add(prompt, 24))
    engine.run()
    for request in requests:
        assert request.out[:24] == alone(target, prompt, 24)
    assert drafting.stats.copied["suffix"] > 0 and drafting.stats.accepted > 0
