"""Batches: input_ids (B, T), left-padded. Every row's greedy output equals transformers'
batched generate with the same padding (and the row generated alone), for every schedule
and draft source, with rows of very different lengths and rows that end early; sampled rows
draw from streams of their own; bad batches end in typed errors."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import torch
from scipy.stats import chisquare
from test_processors import CASES
from test_sampling import ALPHA, accept_always
from tiny_models import noisy_copy, tiny_model
from transformers import StoppingCriteria

import dynaspec
from dynaspec.core import loop as decoding
from dynaspec.errors import InputError, UnsupportedModelError, UnsupportedOptionError

NEW = 24
SCHEDULES = ("adaptive", "dynamic", "constant", "heuristic")
SOURCES = ("model", "lookup", "hybrid")


def padded(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (B, T) ids (pad 0) and their mask."""
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


# Rows of very different lengths; the second repeats itself so that prompt lookup copies.
PROMPTS = [[5, 6, 7], [9, 3, 4, 8, 9, 3, 4, 8, 9, 3, 4, 8, 9, 3], [11], [2, 30, 31, 32, 40, 2, 30]]


@pytest.fixture(scope="module", params=("llama", "qwen2", "gpt2", "gpt_neox"))
def pair(request: pytest.FixtureRequest) -> tuple[object, object]:
    target = tiny_model(request.param)
    return target, noisy_copy(target, scale=0.05)


def run(target, draft, source: str, schedule: str, **kwargs) -> torch.Tensor:
    ids, mask = padded(PROMPTS)
    settings = dict(max_new_tokens=NEW, pad_token_id=0, num_assistant_tokens_schedule=schedule)
    if source != "model":
        settings["prompt_lookup_num_tokens"] = 6
    model = None if source == "lookup" else draft
    settings.update(kwargs)
    return dynaspec.generate(target, model, ids, attention_mask=mask, **settings)


def reference(target, **kwargs) -> torch.Tensor:
    ids, mask = padded(PROMPTS)
    settings = dict(do_sample=False, max_new_tokens=NEW, pad_token_id=0, **kwargs)
    return target.generate(ids, attention_mask=mask, **settings)


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_row_is_transformers_batched_greedy_output(pair, schedule: str, source: str) -> None:
    target, draft = pair
    out = run(target, draft, source, schedule, num_assistant_tokens=4)
    assert torch.equal(out.sequences, reference(target))
    assert len(out.row_stats) == len(PROMPTS)
    assert out.stats.summary().target_forwards == max(len(s.rounds) for s in out.row_stats)
    if source != "model":  # the repeating row copies
        assert sum(r.num_copied for r in out.row_stats[1].rounds) > 0


def test_rows_that_end_early_are_padded_after_their_end(pair) -> None:
    target, draft = pair
    new = reference(target)[:, -NEW:].tolist()
    # A token row 0 emits that some other row never does: rows end at different rounds.
    eos = next(t for t in new[0] if any(t not in row for row in new[1:]))
    expected = reference(target, eos_token_id=eos)
    for source in SOURCES:
        out = run(target, draft, source, "adaptive", eos_token_id=eos)
        assert torch.equal(out.sequences, expected), source
    ended = (expected[:, -NEW:] == eos).any(dim=1)
    assert bool(ended[0]) and not bool(ended.all())  # some rows end, some go on


def test_each_row_equals_the_row_alone(pair) -> None:
    target, draft = pair
    out = run(target, draft, "hybrid", "dynamic")
    width = out.sequences.shape[1] - NEW
    for index, prompt in enumerate(PROMPTS):
        alone = dynaspec.generate(
            target, draft, torch.tensor([prompt]), max_new_tokens=NEW, prompt_lookup_num_tokens=6
        )
        assert out.sequences[index, width:].tolist() == alone.sequences[0, len(prompt) :].tolist()


@pytest.mark.parametrize("case", [name for name in CASES if not name.startswith("encoder")])
def test_processors_act_per_row_as_in_transformers_batches(pair, case: str) -> None:
    target, draft = pair
    keywords = CASES[case]
    out = run(target, draft, "hybrid", "adaptive", **keywords)
    assert torch.equal(out.sequences, reference(target, **keywords))


@pytest.mark.parametrize("source", SOURCES)
def test_scores_and_logits_are_transformers_batched_ones(pair, source: str) -> None:
    target, draft = pair
    new = reference(target)[:, -NEW:].tolist()
    eos = next(t for t in new[0] if any(t not in row for row in new[1:]))  # rows end apart
    wanted = dict(output_scores=True, output_logits=True, return_dict_in_generate=True)
    # repetition_penalty: transformers skips each row's left padding (0s here, which the
    # rows also emit), so a row penalised for its padding would part from it
    expected = reference(target, eos_token_id=eos, repetition_penalty=1.3, **wanted)
    out = run(target, draft, source, "adaptive", eos_token_id=eos, repetition_penalty=1.3, **wanted)
    assert torch.equal(out.sequences, expected.sequences)
    assert len(out.scores) == len(out.logits) == len(expected.scores) == NEW
    width = out.sequences.shape[1] - NEW
    ends = [row.tolist().index(eos) + 1 if eos in row else NEW for row in out.sequences[:, width:]]
    assert min(ends) < NEW  # a row ends early: its later steps are the pad's point mass
    for mine, theirs in ((out.scores, expected.scores), (out.logits, expected.logits)):
        for step, (ours, hf) in enumerate(zip(mine, theirs, strict=True)):
            assert ours.shape == hf.shape == (len(PROMPTS), target.config.vocab_size)
            for row, end in enumerate(ends):
                if step < end:
                    torch.testing.assert_close(ours[row], hf[row], rtol=1e-4, atol=1e-4)
                else:
                    assert int(ours[row].argmax()) == 0 and float(ours[row, 0]) == 0.0
                    assert bool(torch.isinf(ours[row, 1:]).all())


def test_a_criterion_that_reads_scores_sees_each_rows_own() -> None:
    target = tiny_model("llama")
    ids, mask = padded([[5, 6, 7], [9]])
    seen: list[tuple[int, ...]] = []

    def criterion(input_ids: torch.Tensor, scores: tuple, **kwargs: object) -> torch.Tensor:
        seen.append(tuple(scores[-1].shape))
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)

    out = dynaspec.generate(
        target, None, ids, attention_mask=mask, max_new_tokens=4, pad_token_id=0,
        output_scores=True, return_dict_in_generate=True, stopping_criteria=[criterion],
    )  # fmt: skip
    assert len(out.scores) == 4 and out.scores[0].shape[0] == 2
    assert set(seen) == {(1, target.config.vocab_size)}  # one row at a time


class StopAfter(StoppingCriteria):
    """Stops a sequence once it holds `token` among its new tokens."""

    def __init__(self, token: int, prompt_length: int) -> None:
        self.token, self.prompt_length = token, prompt_length

    def __call__(self, input_ids: torch.Tensor, scores: object, **kwargs: object) -> torch.Tensor:
        return (input_ids[:, self.prompt_length :] == self.token).any(dim=1)


def test_a_row_that_meets_a_stopping_criterion_stops_alone(pair) -> None:
    target, draft = pair
    full = reference(target)
    width = full.shape[1] - NEW
    token = int(full[1, width + 3])  # row 1's fourth new token
    criterion = StopAfter(token, width)
    out = run(target, draft, "model", "adaptive", stopping_criteria=[criterion])
    row = out.sequences[1, width:].tolist()
    assert row[: row.index(token) + 1] == full[1, width : width + row.index(token) + 1].tolist()
    assert all(t == 0 for t in row[row.index(token) + 1 :])  # padded after its end
    for index in range(len(PROMPTS)):  # the others run on until they meet it, or to the end
        new = full[index, width:].tolist()
        end = new.index(token) + 1 if token in new else NEW
        assert out.sequences[index, width : width + end].tolist() == new[:end]


def test_sampled_rows_draw_from_streams_of_their_own() -> None:
    target = tiny_model("llama")
    ids, mask = padded([[5, 6, 7]] * 4)
    # A fixed schedule: with adaptive, rounds follow measured times, so draws need not repeat.
    settings = dict(
        do_sample=True,
        seed=3,
        max_new_tokens=16,
        pad_token_id=0,
        num_assistant_tokens_schedule="constant",
    )
    out = dynaspec.generate(
        target, noisy_copy(target, scale=0.05), ids, attention_mask=mask, **settings
    )
    rows = {tuple(row) for row in out.sequences.tolist()}
    assert len(rows) > 1  # the same prompt, different draws
    alone = dynaspec.generate(target, noisy_copy(target, scale=0.05), ids[:1], **settings)
    assert torch.equal(out.sequences[0], alone.sequences[0])  # row 0 draws from `seed`


@pytest.mark.parametrize(
    "ids,mask,error,words",
    [
        ([[5, 6, 0], [5, 6, 7]], [[1, 1, 0], [1, 1, 1]], UnsupportedOptionError, "padding_side"),
        ([[5, 6, 7], [5, 6, 7]], [[1, 1, 1]], InputError, "shape"),
        ([[0, 0, 0], [5, 6, 7]], [[0, 0, 0], [1, 1, 1]], InputError, "all padding"),
        ([[5, 6, 7], [5, 6, 7]], [[1, 2, 1], [1, 1, 1]], InputError, "hold 0"),
        ([[0, 6, 7], [5, 6, 7]], None, InputError, "attention_mask"),
    ],
)
def test_bad_batches_are_refused_with_the_fix(ids, mask, error, words: str) -> None:
    target = tiny_model("llama")
    mask_tensor = None if mask is None else torch.tensor(mask)
    with pytest.raises(error, match=words):
        dynaspec.generate(
            target, None, torch.tensor(ids), attention_mask=mask_tensor, pad_token_id=0
        )


@pytest.mark.parametrize(
    "keywords,words",
    [
        ({"streamer": SimpleNamespace(put=print, end=print)}, "streamer"),
        ({"policy": dynaspec.ConstantPolicy(3)}, "a list of 2 .* policy objects"),
    ],
)
def test_what_batches_do_not_do_yet_is_refused(keywords: dict, words: str) -> None:
    target = tiny_model("llama")
    ids, mask = padded([[5, 6], [7]])
    with pytest.raises(UnsupportedOptionError, match=words):
        dynaspec.generate(target, None, ids, attention_mask=mask, **keywords)


def row_distribution(target, prompt: list[int], length: int) -> dict[tuple[int, ...], float]:
    """The target's exact distribution of `length` new tokens after `prompt` (alone)."""
    out: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        grown = {}
        for prefix, prob in out.items():
            with torch.no_grad():
                logits = target(torch.tensor([prompt + list(prefix)])).logits[0, -1]
            for token, p in enumerate(torch.softmax(logits.double(), -1).tolist()):
                grown[(*prefix, token)] = prob * p
        out = grown
    return out


def pooled_pvalue(counts: Counter, distribution: dict[tuple[int, ...], float]) -> float:
    """Chi-square p-value with the sequences expected fewer than 5 times pooled into one
    cell (a real model leaves many nearly impossible sequences, which the plain test's
    approximation cannot take)."""
    total = sum(counts.values())
    common = [seq for seq, prob in distribution.items() if prob * total >= 5]
    observed = [counts[seq] for seq in common]
    expected = [distribution[seq] * total for seq in common]
    observed.append(total - sum(observed))
    expected.append(total - sum(expected))
    return float(chisquare(observed, expected).pvalue)


def sampled_rows(target, draft, calls: int, seed_mode: str = "keyed") -> list[Counter]:
    """Counts of each row's two new tokens over `calls` seeded batch calls (keyed: coupling;
    stream: rejection sampling)."""
    ids, mask = padded(SAMPLING_PROMPTS)
    counts = [Counter() for _ in SAMPLING_PROMPTS]
    for seed in range(calls):
        out = dynaspec.generate(
            target,
            draft,
            ids,
            attention_mask=mask,
            do_sample=True,
            seed=seed,
            seed_mode=seed_mode,
            max_new_tokens=2,
            num_assistant_tokens=2,
            num_assistant_tokens_schedule="constant",
        )
        for row, sequence in zip(counts, out.sequences[:, -2:].tolist(), strict=True):
            row[tuple(sequence)] += 1
    return counts


SAMPLING_PROMPTS = [[1, 2, 3], [4], [5, 1]]


def sampling_pair() -> tuple[object, object]:
    target = tiny_model("llama", vocab_size=6, initializer_range=0.5)
    return target, noisy_copy(target, scale=0.5)


@pytest.mark.parametrize("seed_mode", ["keyed", "stream"])
def test_sampled_rows_follow_their_target_distribution(seed_mode: str) -> None:
    target, draft = sampling_pair()
    rows = sampled_rows(target, draft, 500, seed_mode)
    for counts, prompt in zip(rows, SAMPLING_PROMPTS, strict=True):
        pvalue = pooled_pvalue(counts, row_distribution(target, prompt, 2))
        assert pvalue > ALPHA, f"row {prompt}: p = {pvalue:.2e}"


@pytest.mark.parametrize("seed_mode", ["keyed", "stream"])
def test_the_row_check_fails_for_a_broken_verifier(
    monkeypatch: pytest.MonkeyPatch, seed_mode: str
) -> None:
    monkeypatch.setattr(decoding, "speculative_sample", accept_always)
    monkeypatch.setattr(decoding, "coupled_accept", lambda drafted, target_tokens: (
        drafted.numel(), target_tokens[drafted.numel()]))  # fmt: skip
    target, draft = sampling_pair()
    rows = sampled_rows(target, draft, 300, seed_mode)
    pvalues = [
        pooled_pvalue(counts, row_distribution(target, prompt, 2))
        for counts, prompt in zip(rows, SAMPLING_PROMPTS, strict=True)
    ]
    assert min(pvalues) < ALPHA


def test_an_encoder_decoder_model_is_refused_up_front_saying_why() -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2,
        decoder_start_token_id=0,
    )  # fmt: skip
    ids, mask = padded([[5, 6, 7], [8]])
    with pytest.raises(UnsupportedModelError, match="encoder-decoder.*once per prompt"):
        dynaspec.generate(T5ForConditionalGeneration(config), None, ids, attention_mask=mask)
