"""Adapters shared between threads (core/sharing.py): every generate call holds the lock of
each adapter it uses for its whole length, so threads that share a target or a draft get
exactly the output one thread gets, never another text and never an error from a cache
another call overwrote. The same object as target and draft decodes through a fork."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from tiny_models import ScriptedModel, hf_greedy, noisy_copy, random_prompts, shift_rule, tiny_model

import dynaspec
from dynaspec.backends import HFAdapter, StaticAdapter
from dynaspec.backends.static import make_fast
from dynaspec.errors import ConfigError, IncompatibleModelsError

VOCAB = 64
NEW_TOKENS = 24
THREADS = 8
TRIALS = 3
# The draft runs every round, so each call writes both caches many times.
DRAFT_RUNS = {"num_assistant_tokens_schedule": "dynamic", "max_new_tokens": NEW_TOKENS}


def models(arch: str = "llama") -> tuple[torch.nn.Module, torch.nn.Module]:
    target = tiny_model(arch, vocab_size=VOCAB, num_layers=2, hidden_size=32, max_length=256)
    return target, noisy_copy(target, scale=0.05, seed=1)


PROMPTS = random_prompts(THREADS, VOCAB, min_len=3, max_len=8, seed=3)


def in_threads(call: Callable[[torch.Tensor], torch.Tensor]) -> list[list[Any]]:
    """`call(prompt)` for every prompt in THREADS threads at once, TRIALS times over;
    [trial][prompt] -> the sequences, or the exception raised."""

    def guarded(prompt: torch.Tensor) -> Any:
        try:
            return call(prompt)
        except Exception as error:  # noqa: BLE001 - any error is a failure the test reports
            return error

    with ThreadPoolExecutor(THREADS) as pool:
        return [list(pool.map(guarded, PROMPTS)) for _ in range(TRIALS)]


def assert_all_equal(results: list[list[Any]], reference: list[torch.Tensor]) -> None:
    for trial in results:
        for got, want in zip(trial, reference, strict=True):
            assert isinstance(got, torch.Tensor), repr(got)
            assert torch.equal(got, want)


def fast_pairs() -> dict[str, tuple[Any, Any]]:
    target, draft = models()
    return {
        "static": (make_fast(target, static=True), make_fast(draft, static=True)),
        "int8 target, transformers draft": (make_fast(target, quantize="int8"), draft),
        "hf adapters": (HFAdapter(target), HFAdapter(draft)),
        "transformers models": (target, draft),
    }


@pytest.mark.parametrize("kind", list(fast_pairs()))
def test_shared_adapters_give_the_single_thread_output(kind: str) -> None:
    target, draft = fast_pairs()[kind]

    def call(prompt: torch.Tensor) -> torch.Tensor:
        return dynaspec.generate(target, draft, prompt, **DRAFT_RUNS).sequences

    reference = [call(prompt) for prompt in PROMPTS]
    assert_all_equal(in_threads(call), reference)


def test_shared_static_adapters_sample_as_one_thread_does() -> None:
    target, draft = models()
    fast_target, fast_draft = make_fast(target, static=True), make_fast(draft, static=True)

    def call(prompt: torch.Tensor) -> torch.Tensor:
        return dynaspec.generate(
            fast_target, fast_draft, prompt, do_sample=True, seed=7, **DRAFT_RUNS
        ).sequences

    reference = [call(prompt) for prompt in PROMPTS]
    assert_all_equal(in_threads(call), reference)


def test_one_static_adapter_as_target_and_draft_is_the_target_alone() -> None:
    target, _ = models()
    fast = make_fast(target, static=True)
    for prompt in PROMPTS[:3]:
        alone = dynaspec.generate(fast, None, prompt, max_new_tokens=NEW_TOKENS).sequences
        both = dynaspec.generate(fast, fast, prompt, **DRAFT_RUNS)
        assert torch.equal(both.sequences, alone)
        assert both.stats.summary().draft_forwards > 0  # the fork drafted
        assert torch.equal(alone, hf_greedy(target, prompt, NEW_TOKENS))


def test_one_adapter_as_target_and_draft_in_many_threads() -> None:
    target, _ = models()
    shared = {"static": make_fast(target, static=True), "hf": HFAdapter(target)}
    for adapter in shared.values():

        def call(prompt: torch.Tensor, adapter: Any = adapter) -> torch.Tensor:
            return dynaspec.generate(adapter, adapter, prompt, **DRAFT_RUNS).sequences

        reference = [hf_greedy(target, prompt, NEW_TOKENS) for prompt in PROMPTS]
        assert_all_equal(in_threads(call), reference)


def test_an_adapter_without_fork_as_target_and_draft_is_refused_up_front() -> None:
    model = ScriptedModel.greedy(shift_rule(1, 16), 16)
    with pytest.raises(IncompatibleModelsError, match="draft=None"):
        dynaspec.generate(model, model, torch.tensor([[1, 2]]), max_new_tokens=4)
    assert model.calls == []  # nothing ran


def test_target_and_draft_swapped_in_two_threads_never_deadlock() -> None:
    """Locks are taken in one order, so (a, b) and (b, a) at once both finish."""
    target, draft = models()
    a, b = make_fast(target, static=True), make_fast(draft, static=True)
    prompt = PROMPTS[0]
    expected = {
        (id(a), id(b)): dynaspec.generate(a, b, prompt, **DRAFT_RUNS).sequences,
        (id(b), id(a)): dynaspec.generate(b, a, prompt, **DRAFT_RUNS).sequences,
    }
    failures: list[BaseException] = []

    def run(first: StaticAdapter, second: StaticAdapter) -> None:
        try:
            for _ in range(6):
                out = dynaspec.generate(first, second, prompt, **DRAFT_RUNS).sequences
                assert torch.equal(out, expected[(id(first), id(second))])
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=run, args=pair, daemon=True) for pair in [(a, b), (b, a)]]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "deadlock"
    assert failures == []


def test_generate_inside_a_generate_call_on_the_same_adapter_is_a_typed_error() -> None:
    target, _ = models()
    fast = make_fast(target, static=True)

    class Reentrant:
        def put(self, value: torch.Tensor) -> None:
            dynaspec.generate(fast, None, PROMPTS[0], max_new_tokens=2)

        def end(self) -> None:
            pass

    with pytest.raises(ConfigError, match="its own adapter"):
        dynaspec.generate(fast, None, PROMPTS[0], max_new_tokens=4, streamer=Reentrant())
    # The lock was released: the adapter still decodes.
    out = dynaspec.generate(fast, None, PROMPTS[0], max_new_tokens=NEW_TOKENS).sequences
    assert torch.equal(out, hf_greedy(target, PROMPTS[0], NEW_TOKENS))
