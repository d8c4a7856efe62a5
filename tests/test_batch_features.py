"""The single path's features in a batch and in a continuous batch (the server's): a streamer
per row, a policy object per row, a draft with another tokenizer, a sliding-window model.
Every greedy row equals the row generated alone, exactly (fp32 tiny models); what a batch
cannot take is refused with a typed error that says what to pass."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_cross_tokenizer import (
    bytes_tokenizer,
    permuted_copy,
    permuted_tokenizer,
    printable_only,
    prompt_ids,
)
from test_sliding_window import window_model
from tiny_models import noisy_copy, tiny_model

import dynaspec
from dynaspec.continuous import ContinuousBatch
from dynaspec.core.config import SpecConfig
from dynaspec.errors import ConfigError, UnsupportedOptionError
from dynaspec.policies import make_policy

NEW = 20
ROWS = [[5, 6, 7, 5, 6, 7, 5], [9, 3]]


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (B, T) ids (pad 0) and their mask."""
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


class Collect:
    """transformers' streamer protocol: what was put, and whether it ended."""

    def __init__(self) -> None:
        self.parts: list[list[int]] = []
        self.ended = 0

    def put(self, value: torch.Tensor) -> None:
        assert value.dim() == 2 and value.shape[0] == 1, value.shape
        self.parts.append(value[0].tolist())

    def end(self) -> None:
        self.ended += 1

    @property
    def tokens(self) -> list[int]:
        return [token for part in self.parts for token in part]


def alone(target: Any, draft: Any, row: list[int], **kwargs: Any) -> list[int]:
    out = dynaspec.generate(target, draft, torch.tensor([row]), max_new_tokens=NEW, **kwargs)
    return out.sequences[0].tolist()


def rows_of(out: Any, rows: list[list[int]]) -> list[list[int]]:
    """Each row's prompt and new tokens, without the padding on either side."""
    width = max(map(len, rows))
    got = []
    for index, row in enumerate(rows):
        stats = out.row_stats[index].summary()
        new = out.sequences[index, width : width + stats.new_tokens].tolist()
        got.append(row + new)
    return got


@pytest.fixture(scope="module")
def pair() -> tuple[Any, Any]:
    target = tiny_model("llama")
    return target, noisy_copy(target, scale=0.05)


@pytest.mark.parametrize("schedule", ["adaptive", "dynamic"])
def test_a_streamer_per_row_gets_what_it_gets_alone(pair, schedule: str) -> None:
    target, draft = pair
    ids, mask = padded(ROWS)
    streamers = [Collect(), Collect()]
    settings = dict(num_assistant_tokens_schedule=schedule, prompt_lookup_num_tokens=4)
    out = dynaspec.generate(
        target, draft, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0,
        streamer=streamers, **settings,
    )  # fmt: skip
    for row, streamer in zip(ROWS, streamers, strict=True):
        single = Collect()
        expected = alone(target, draft, row, streamer=single, **settings)
        assert streamer.tokens == expected == single.tokens
        assert streamer.parts[0] == row and streamer.ended == 1
    assert rows_of(out, ROWS) == [s.tokens for s in streamers]


def test_one_streamer_for_a_batch_is_refused_saying_what_to_pass(pair) -> None:
    ids, mask = padded(ROWS)
    with pytest.raises(UnsupportedOptionError, match="a list of 2"):
        dynaspec.generate(*pair, ids, attention_mask=mask, streamer=Collect())


def test_a_policy_object_per_row(pair) -> None:
    target, draft = pair
    ids, mask = padded(ROWS)
    spec = SpecConfig(num_assistant_tokens_schedule="heuristic")
    policies = [make_policy(spec), make_policy(spec)]
    out = dynaspec.generate(
        target, draft, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0,
        policy=policies,
    )  # fmt: skip
    singles = [make_policy(spec) for _ in ROWS]
    expected = [alone(target, draft, row, policy=p) for row, p in zip(ROWS, singles, strict=True)]
    assert rows_of(out, ROWS) == expected
    # each learned from its own row, as alone
    assert [p.lookahead for p in policies] == [p.lookahead for p in singles]
    with pytest.raises(UnsupportedOptionError, match="a list of 2"):
        dynaspec.generate(target, draft, ids, attention_mask=mask, policy=policies[0])
    with pytest.raises(UnsupportedOptionError, match="policy object per row"):
        dynaspec.generate(target, draft, ids, attention_mask=mask, policy=[policies[0]] * 2)


TEXTS = ("Once upon a time", "naive cafe ok")


@pytest.fixture(scope="module")
def cross_pair() -> tuple[Any, Any, dict[str, Any]]:
    """The byte tokenizer's target and itself under permuted ids, with their tokenizers: a
    draft of another vocabulary whose tokens are mostly accepted."""
    permuted, to_base = permuted_tokenizer()
    target = tiny_model("llama", vocab_size=257, hidden_size=32, max_length=512)
    target = printable_only(target, bytes_tokenizer())
    tokenizers = {"tokenizer": bytes_tokenizer(), "assistant_tokenizer": permuted}
    return target, permuted_copy(target, to_base), tokenizers


@pytest.mark.parametrize("method", ["string", "intersection"])
def test_a_draft_with_another_tokenizer_drafts_for_every_row(cross_pair, method: str) -> None:
    target, draft, tokenizers = cross_pair
    rows = [prompt_ids(bytes_tokenizer(), text)[0].tolist() for text in TEXTS]
    ids, mask = padded(rows)
    settings = dict(cross_tokenizer=method, num_assistant_tokens_schedule="constant", **tokenizers)
    out = dynaspec.generate(
        target, draft, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0, **settings
    )
    expected = [alone(target, None, row) for row in rows]
    assert rows_of(out, rows) == expected
    assert sum(stats.summary().num_accepted for stats in out.row_stats) > 0


@pytest.mark.parametrize("kind", ["mistral", "gemma2"])
def test_a_sliding_window_model_decodes_every_row_as_alone(kind: str) -> None:
    target = window_model(kind)
    draft = window_model(kind, seed=1)
    rows = [[5, 6, 7, 8, 9, 10, 11], [12, 3]]
    ids, mask = padded(rows)
    for model in (None, draft):
        out = dynaspec.generate(
            target, model, ids, attention_mask=mask, max_new_tokens=NEW, pad_token_id=0,
            num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
        )  # fmt: skip
        assert rows_of(out, rows) == [alone(target, None, row) for row in rows]


def served(batch: ContinuousBatch, rows: list[list[int]], **kwargs: Any) -> list[Collect]:
    """Every row joins `batch` (the second after a round of the first), streamed; rounds
    until all have ended. Returns their streamers (`.row`: the batch's row)."""
    streamers = []
    for row in rows:
        made = batch.make_row(row, {"max_new_tokens": NEW, **kwargs})
        made.streamer = Collect()
        made.streamer.row = made
        streamers.append(made.streamer)
        batch.join(made, row)
        batch.step()
        batch.leave(lambda r: r.done)
    while batch.rows:
        batch.step()
        batch.leave(lambda r: r.done)
    return streamers


def test_the_continuous_batch_takes_another_tokenizer_and_streams(cross_pair) -> None:
    target, draft, tokenizers = cross_pair
    spec = SpecConfig(num_assistant_tokens=5, num_assistant_tokens_schedule="constant")
    batch = ContinuousBatch(target, draft, spec, **tokenizers)
    rows = [prompt_ids(bytes_tokenizer(), text)[0].tolist() for text in TEXTS]
    streamers = served(batch, rows)
    assert [s.tokens for s in streamers] == [alone(target, None, row) for row in rows]
    assert all(s.ended == 1 for s in streamers)
    assert all(s.row.stats.summary().num_accepted for s in streamers)


def test_the_continuous_batch_takes_a_sliding_window_model() -> None:
    target, draft = window_model("mistral"), window_model("mistral", seed=1)
    rows = [[5, 6, 7, 8, 9, 10, 11], [12, 3]]
    streamers = served(ContinuousBatch(target, draft), rows)
    assert [s.tokens for s in streamers] == [alone(target, None, row) for row in rows]


def test_a_lone_row_takes_the_single_adapters_path_bit_for_bit() -> None:
    """A running batch with one row and no holes (a request alone in the server) feeds
    transformers as the single adapter does: the same logits, bit for bit."""
    from dynaspec.backends.hf import HFAdapter
    from dynaspec.backends.hf_batch import HFBatchAdapter

    model = tiny_model("llama")
    batch, single = HFBatchAdapter(model), HFAdapter(model)
    prompt = torch.tensor([5, 6, 7, 8])
    batch.join(prompt)  # its first three tokens prefilled
    single.begin(prompt[None])
    single.forward(prompt[:-1], 1)
    masks = []
    forward = model.forward

    def spy(*args: Any, **kwargs: Any) -> Any:
        masks.append(kwargs.get("attention_mask"))
        return forward(*args, **kwargs)

    model.forward = spy
    for feed in ([8], [9, 10, 11], [12]):
        ids = torch.tensor(feed)
        got = batch.forward([ids], [len(feed)])[0]
        assert torch.equal(got, single.forward(ids, len(feed)))
    assert masks == [None] * 6  # three forwards each, none given a mask
    batch.join(torch.tensor([3, 4]))  # a second row: masks again
    batch.forward([torch.tensor([13]), torch.tensor([4])], [1, 1])
    assert masks[-1] is not None


def test_a_row_that_leaves_before_its_end_ends_its_stream(pair) -> None:
    batch = ContinuousBatch(*pair)
    row = batch.make_row([5, 6, 7], {"max_new_tokens": NEW})
    row.streamer = Collect()
    batch.join(row, [5, 6, 7])
    batch.step()
    assert batch.leave(lambda r: True) == [row] and not row.done
    assert row.streamer.ended == 1 and row.streamer.tokens == row.committed.tolist()


def test_the_continuous_batch_makes_each_row_a_policy_object(pair) -> None:
    """ContinuousBatch(policy=a function): each joining row plans with a policy object of its
    own, as generate(policy=...) alone (a policy written once reaches the server)."""
    target, draft = pair
    spec = SpecConfig(num_assistant_tokens_schedule="heuristic")
    made = []

    def make():
        made.append(make_policy(spec))
        return made[-1]

    streamers = served(ContinuousBatch(target, draft, policy=make), ROWS)
    singles = [make_policy(spec) for _ in ROWS]
    expected = [alone(target, draft, row, policy=p) for row, p in zip(ROWS, singles, strict=True)]
    assert [s.tokens for s in streamers] == expected
    assert [p.lookahead for p in made[-len(ROWS) :]] == [p.lookahead for p in singles]
    with pytest.raises(ConfigError, match="BatchPolicy or a function"):
        ContinuousBatch(target, draft, policy=make_policy(spec))
