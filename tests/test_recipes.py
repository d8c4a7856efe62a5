"""The one-edit recipes (docs/design/architecture.md): a policy added in one place (one
`SCHEDULES` entry) and a drafter added in one place (`make_drafter`) each reach `generate`,
a batch, a `ContinuousBatch` (the server's) and a vLLM proposer, through the one protocol of
their role (`LookaheadPolicy`, `Drafter`). Every greedy row equals the target alone."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_batch_features import padded, rows_of, served
from tiny_models import noisy_copy, tiny_model

import dynaspec
import dynaspec.drafters as drafters
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.config import SpecConfig
from dynaspec.core.round import Round
from dynaspec.integrations.vllm import DraftModelProposer, LookupProposer, ProposerSettings
from dynaspec.policies import SCHEDULES, Schedule
from tests.vllm_sim import SimEngine, alone, looping_target

NEW = 20
ROWS = [[5, 6, 7, 5, 6, 7, 5], [9, 3]]


class EveryOther(Schedule):
    """A new policy: 3 tokens in every other round, none in the rounds between."""

    name = "every_other"
    made: list[EveryOther] = []

    def __init__(self) -> None:
        self.rounds = 0
        EveryOther.made.append(self)

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return 3 if self.rounds % 2 == 0 else 0

    def update(self, round: Round) -> None:
        self.rounds += 1


class Counted:
    """A new drafter: another drafter's proposals, counted (any `Drafter` will do)."""

    proposed = 0

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> None:
        self.inner.begin(input_ids, max_length)

    def offer(self, tokens: torch.Tensor) -> Any:
        return self.inner.offer(tokens)

    def propose(self, *args: Any) -> Any:
        Counted.proposed += 1
        return self.inner.propose(*args)

    def crop(self, num_committed: int) -> None:
        self.inner.crop(num_committed)


@pytest.fixture
def policy_added(monkeypatch: pytest.MonkeyPatch) -> str:
    """The one edit that adds a policy: its schedule name in SCHEDULES."""
    EveryOther.made = []
    monkeypatch.setitem(SCHEDULES, "every_other", lambda config: EveryOther())
    return "every_other"


@pytest.fixture
def drafter_added(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one edit that adds a drafter: `make_drafter` makes it."""
    made = drafters.make_drafter
    Counted.proposed = 0

    def make(*args: Any, **kwargs: Any) -> Any:
        inner = made(*args, **kwargs)
        return None if inner is None else Counted(inner)

    monkeypatch.setattr(drafters, "make_drafter", make)


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Any]:
    target = tiny_model("llama")
    return target, noisy_copy(target, scale=0.05)


def target_alone(target: Any, row: list[int]) -> list[int]:
    out = dynaspec.generate(target, None, torch.tensor([row]), max_new_tokens=NEW)
    return out.sequences[0].tolist()


def everywhere(pair: tuple[Any, Any], **settings: Any) -> None:
    """generate, a batch of 2 and a ContinuousBatch with `settings`: each row as alone."""
    target, draft = pair
    expected = [target_alone(target, row) for row in ROWS]
    for row, want in zip(ROWS, expected, strict=True):
        out = dynaspec.generate(target, draft, torch.tensor([row]), max_new_tokens=NEW, **settings)
        assert out.sequences[0].tolist() == want
    ids, mask = padded(ROWS)
    out = dynaspec.generate(
        target, draft, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0, **settings
    )
    assert rows_of(out, ROWS) == expected
    schedule = settings.get("num_assistant_tokens_schedule", "adaptive")
    spec = SpecConfig(num_assistant_tokens_schedule=schedule)
    lookup = settings.get("prompt_lookup_num_tokens")
    batch = ContinuousBatch(target, draft, spec, prompt_lookup_num_tokens=lookup)
    assert [s.tokens for s in served(batch, ROWS)] == expected


def test_a_policy_added_in_one_place_reaches_every_entry_point(pair, policy_added) -> None:
    everywhere(pair, num_assistant_tokens_schedule=policy_added)
    # one per generate() call (2), one per batch row (2), one per joining row (2)
    assert sum(policy.rounds > 0 for policy in EveryOther.made) == 6


def test_a_policy_added_in_one_place_reaches_the_vllm_proposer(policy_added) -> None:
    EveryOther.made = []
    settings = ProposerSettings(num_speculative_tokens=4, vocab_size=12, schedule=policy_added)
    target = looping_target()
    engine = SimEngine(LookupProposer(settings=settings), target, max_num_seqs=2, k=4)
    requests = [engine.add([1, 2, 3, 1, 2, 3, 1, i], 24) for i in range(3)]
    engine.run()
    for request in requests:
        assert request.out[: request.max_tokens] == alone(target, request.prompt, 24)
    assert EveryOther.made and all(policy.rounds > 0 for policy in EveryOther.made)


@pytest.mark.parametrize("lookup", [None, 4], ids=["model", "hybrid"])
def test_a_drafter_added_in_one_place_reaches_every_entry_point(
    pair, drafter_added, lookup
) -> None:
    # constant: the tiny draft is as large as the target, so the adaptive rule never drafts
    everywhere(pair, prompt_lookup_num_tokens=lookup, num_assistant_tokens_schedule="constant")
    assert Counted.proposed > 0


def test_a_drafter_added_in_one_place_reaches_the_vllm_proposer(pair, drafter_added) -> None:
    model, draft = pair

    @torch.no_grad()
    def target(tokens: list[int]) -> int:
        return int(model(torch.tensor([tokens])).logits[0, -1].argmax())

    vocab = model.config.vocab_size
    settings = ProposerSettings(num_speculative_tokens=4, vocab_size=vocab, schedule="constant")
    proposer = DraftModelProposer(settings=settings, model=draft)
    engine = SimEngine(proposer, target, max_num_seqs=2, k=4)
    requests = [engine.add(row, 12) for row in ROWS]
    engine.run()
    for request in requests:
        assert request.out[: request.max_tokens] == alone(target, request.prompt, 12)
    assert Counted.proposed > 0 and proposer.stats.accepted > 0
