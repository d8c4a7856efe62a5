"""The one-edit recipes (docs/design/architecture.md): a policy added in one place (one
`SCHEDULES` entry) and a drafter added in one place (`make_drafter`) each reach `generate`,
a batch, a `ContinuousBatch` (the server's) and a vLLM proposer, through the one protocol of
their role (`LookaheadPolicy`, `Drafter`); so does a backend written once (a class that
satisfies `ModelAdapter`, with `fork()`), as target and draft, and as the vLLM proposer's
draft. Every greedy row equals the target alone."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import torch
from test_batch_features import padded, rows_of, served
from tiny_models import noisy_copy, tiny_model

import dynaspec
import dynaspec.drafters as drafters
from dynaspec.backends.row_adapters import RowAdapters
from dynaspec.backends.static_batch import batch_adapter
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.config import SpecConfig
from dynaspec.core.protocols import ModelAdapter
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


class OwnCache:
    """A new backend, written once: a transformers model run with a cache this class keeps
    itself; any `ModelAdapter` with a `fork()` will do."""

    is_encoder_decoder = False
    made = 0  # adapters made, the caller's and every fork

    def __init__(self, model: Any) -> None:
        self.model = model
        self.vocab_size = model.config.vocab_size
        self.max_length = model.config.max_position_embeddings
        self.device = model.device
        self.generation_config = model.generation_config  # its EOS ids, as the model's
        params = inspect.signature(model.forward).parameters
        self.key = "cache" if "cache" in params else "past_key_values"
        self.cache: Any = None
        self.num_cached = 0
        OwnCache.made += 1

    def fork(self) -> OwnCache:
        return OwnCache(self.model)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        self.cache, self.num_cached = None, 0
        return input_ids[0]

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        out = self.model(input_ids=new_tokens.view(1, -1), use_cache=True, **{self.key: self.cache})
        self.cache = getattr(out, self.key)
        self.num_cached += new_tokens.numel()
        return out.logits[0, -num_logits:]

    def crop(self, num_tokens: int) -> None:
        if num_tokens < self.num_cached:
            self.cache.crop(num_tokens - self.num_cached)  # negative: remove that many
            self.num_cached = num_tokens


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


def everywhere(pair: tuple[Any, Any], alone: Any = None, **settings: Any) -> None:
    """generate, a batch of 2 and a ContinuousBatch with `settings`: each row as the target
    alone (the transformers model `alone`, by default the pair's target)."""
    target, draft = pair
    expected = [target_alone(target if alone is None else alone, row) for row in ROWS]
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


def through_vllm(model: Any, draft: Any) -> DraftModelProposer:
    """The simulated vLLM engine over `model`, drafting with `draft`: each request as the
    target alone; returns the proposer."""

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
    return proposer


def test_a_drafter_added_in_one_place_reaches_the_vllm_proposer(pair, drafter_added) -> None:
    proposer = through_vllm(*pair)
    assert Counted.proposed > 0 and proposer.stats.accepted > 0


@pytest.mark.parametrize("lookup", [None, 4], ids=["model", "hybrid"])
def test_a_backend_added_in_one_place_reaches_every_entry_point(pair, lookup) -> None:
    target, draft = pair
    adapters = OwnCache(target), OwnCache(draft)
    assert all(isinstance(adapter, ModelAdapter) for adapter in adapters)
    # its batch form: a fork per row (backends/row_adapters.py), derived, not written
    assert isinstance(batch_adapter(adapters[0]), RowAdapters)
    OwnCache.made = 0
    everywhere(
        adapters,
        alone=target,
        prompt_lookup_num_tokens=lookup,
        num_assistant_tokens_schedule="constant",
    )
    # the batch and the ContinuousBatch decoded with forks of the two adapters
    assert OwnCache.made >= 2 * len(ROWS)


def test_a_backend_added_in_one_place_drafts_in_the_vllm_proposer(pair) -> None:
    target, draft = pair
    OwnCache.made = 0
    proposer = through_vllm(target, OwnCache(draft))
    assert OwnCache.made > 1 and proposer.stats.accepted > 0  # a fork per request
