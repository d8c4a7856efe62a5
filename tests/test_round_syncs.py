"""Host-device transfers per round (issue 63: per-round host work off the critical path).

On a GPU every read of a tensor's value on the host (`.item()`, `.tolist()`, `bool()`,
`int()`, `.cpu()`, ...) waits for the device to finish what it was given, so the host cannot
queue the next forward meanwhile. Counted here on the CPU, with the tensor methods wrapped for
one generate() call over the static path with graph buckets: a round of the target alone
reads one value (its logits' finite check); a speculative round reads two (the finite check
and the accept decision) plus one per drafted token (the draft's token, its confidence and
its finite check in one transfer: the stopper decides on the host whether to draft the next).
The call's set-up (validation) reads a few more, once. Besides, the draft's proposal and the
target's forward are each timed between two waits for the device (`core.timing.device_clock`:
what the cost model learns), each end where the round reads their values anyway."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.backends.static import make_fast
from dynaspec.core import timing

# Everything that reads a tensor's value on the host.
READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__", "cpu", "numpy")
SETUP_READS = 4  # once per call, outside the rounds (argument validation)


@contextmanager
def counted_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()

    def wrapped(name: str) -> Any:
        original = getattr(torch.Tensor, name)

        def read(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return original(self, *args, **kwargs)

        return read

    def wait(device: Any) -> None:
        counts["device_clock"] += 1

    with monkeypatch.context() as patch:
        for name in READS:
            patch.setattr(torch.Tensor, name, wrapped(name))
        patch.setattr(timing, "synchronize", wait)
        yield counts


@pytest.fixture(scope="module")
def models() -> tuple[Any, Any]:
    target = tiny_model("qwen2", vocab_size=64, num_layers=2, hidden_size=32)
    draft = noisy_copy(target, scale=0.02, seed=1)
    return make_fast(target, static=True, graphs=True), make_fast(draft, static=True, graphs=True)


@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
def test_a_speculative_round_reads_two_values_and_one_per_drafted_token(
    models: tuple[Any, Any], schedule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, draft = models
    prompt = torch.tensor([[1, 2, 3, 4]])
    kwargs = {"max_new_tokens": 40, "num_assistant_tokens_schedule": schedule}
    dynaspec.generate(target, draft, prompt, **kwargs)  # warm (nothing first-call only)
    with counted_reads(monkeypatch) as counts:
        out = dynaspec.generate(target, draft, prompt, **kwargs)
    rounds = out.stats.rounds
    drafted = sum(record.num_drafted for record in rounds)
    assert drafted > len(rounds)  # the draft ran: its reads are counted
    waits = counts.pop("device_clock")
    assert sum(counts.values()) <= SETUP_READS + 2 * len(rounds) + drafted, counts
    assert waits <= 4 * len(rounds) + SETUP_READS  # the draft phase's and the target's


def test_a_round_of_the_target_alone_reads_one_value(
    models: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    target, _ = models
    prompt = torch.tensor([[1, 2, 3, 4]])
    dynaspec.generate(target, None, prompt, max_new_tokens=40)
    with counted_reads(monkeypatch) as counts:
        out = dynaspec.generate(target, None, prompt, max_new_tokens=40)
    assert len(out.stats.rounds) == 40
    waits = counts.pop("device_clock")
    assert sum(counts.values()) <= SETUP_READS + len(out.stats.rounds), counts
    assert waits <= 2 * len(out.stats.rounds) + SETUP_READS
