"""One table of transformers' generation keywords (compat/keywords.py) drives GenerationKwargs,
the settings records and the processor list: every entry reaches all three, and a new entry
reaches them with no other edit."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from test_settings import EVERYTHING
from tiny_models import tiny_model
from transformers import GenerationConfig
from transformers.generation import logits_process as lp

import dynaspec
from dynaspec.compat import keywords
from dynaspec.compat.keywords import KEYWORDS, PROCESSORS, BuildContext, Keyword, of_record
from dynaspec.compat.keywords import build_stage as _build
from dynaspec.compat.processing import full_processor_list
from dynaspec.compat.records import OutputConfig, ProcessorConfig, SamplingConfig
from dynaspec.compat.settings import resolve_settings

PROMPT = torch.tensor([[3, 9, 4]])
RECORDS = {"sampling": SamplingConfig, "processors": ProcessorConfig, "outputs": OutputConfig}
# A value that is not the default and builds its processor, for every keyword of a record.
EXAMPLES: dict[str, Any] = {
    **EVERYTHING,  # every processor and warper, in transformers' order
    "min_length": 5,
    "output_scores": True,
    "output_logits": True,
}


@pytest.fixture(scope="module")
def target() -> Any:
    return tiny_model("llama", seed=0, vocab_size=64)


def test_names_are_unique_and_every_record_keyword_has_an_example() -> None:
    names = [keyword.name for keyword in KEYWORDS]
    assert len(names) == len(set(names))
    in_records = {k.name for k in KEYWORDS if k.record in RECORDS}
    assert in_records == set(EXAMPLES), "give a new keyword an example value here"


def test_generation_kwargs_is_the_table() -> None:
    annotations = dynaspec.GenerationKwargs.__annotations__
    assert list(annotations) == [keyword.name for keyword in KEYWORDS]
    assert all(annotations[k.name] == k.type for k in KEYWORDS)
    assert not dynaspec.GenerationKwargs.__required_keys__
    for keyword in KEYWORDS:  # its documentation: a line per keyword
        assert f"    {keyword.name} (" in dynaspec.GenerationKwargs.__doc__
        assert keyword.doc in dynaspec.GenerationKwargs.__doc__


@pytest.mark.parametrize("record", sorted(RECORDS))
def test_the_records_fields_are_the_tables(record: str) -> None:
    fields = {f.name: f.default for f in dataclasses.fields(RECORDS[record])}
    fields.pop("seed", None)  # SamplingConfig's own: not keywords
    fields.pop("seed_mode", None)
    assert fields == {k.name: k.default for k in of_record(record)}


def test_every_record_keyword_is_read_from_the_call_and_from_a_checkpoint() -> None:
    checkpoint = SimpleNamespace(generation_config=GenerationConfig(**EXAMPLES))
    for call, model in (({**EXAMPLES}, None), ({}, checkpoint)):
        settings = resolve_settings(call, model, None, input_length=3, seed=None)
        for record in RECORDS:
            values = dataclasses.asdict(getattr(settings, record))
            assert {k.name: values[k.name] for k in of_record(record)} == {
                k.name: EXAMPLES[k.name] for k in of_record(record)
            }


def test_every_staged_keyword_builds_its_processor_in_table_order() -> None:
    settings = resolve_settings({**EXAMPLES, "eos_token_id": [2]}, None, None, 3, None)
    built = full_processor_list(
        settings.sampling, settings.processors, None, PROMPT, 3, settings.limits
    )
    staged = [k for k in KEYWORDS if k.stage is not None]
    assert len(built) == len(staged)  # each entry's condition holds for its example
    for keyword in staged:  # alone, each builds exactly one processor
        alone = {keyword.name: EXAMPLES[keyword.name], "do_sample": True, "eos_token_id": [2]}
        settings = resolve_settings(alone, None, None, 3, None)
        one = full_processor_list(
            settings.sampling, settings.processors, None, PROMPT, 3, settings.limits
        )
        # min_new_tokens also sets min_length (input + min_new_tokens), as in transformers.
        assert len(one) == (2 if keyword.name == "min_new_tokens" else 1), keyword.name
        assert type(one[-1]) is type(built[staged.index(keyword)]), keyword.name


def test_generate_accepts_every_keyword(target: Any) -> None:
    """Every keyword passed as None (off) at once; then every example at once."""
    nones = {k.name: None for k in KEYWORDS}
    off = dynaspec.generate(target, None, PROMPT, **{**nones, "max_new_tokens": 4})
    plain = dynaspec.generate(target, None, PROMPT, max_new_tokens=4)
    assert off.sequences.tolist() == plain.sequences.tolist() and off.stats.processors == ()
    out = dynaspec.generate(
        target, None, PROMPT, **{**EXAMPLES, "max_new_tokens": 4, "eos_token_id": [2], "seed": 0}
    )
    assert len(out.scores) == len(out.logits) == out.sequences.shape[1] - 3
    assert len(out.stats.processors) == len([k for k in KEYWORDS if k.stage is not None])


class Shift(lp.LogitsProcessor):
    """A stand-in for a processor transformers might add."""

    def __init__(self, amount: float) -> None:
        self.amount = amount

    def __call__(self, input_ids: Any, scores: torch.Tensor) -> torch.Tensor:
        return scores + self.amount


def test_a_new_entry_reaches_all_three(monkeypatch: pytest.MonkeyPatch) -> None:
    """One entry, placed before repetition_penalty: typed, a record field, built in place."""
    new = keywords.processor("shift", float, "adds this to every score", lambda v, c: Shift(v))
    at = [k.name for k in KEYWORDS].index("repetition_penalty")
    table: tuple[Keyword, ...] = KEYWORDS[:at] + (new,) + KEYWORDS[at:]
    monkeypatch.setattr(keywords, "KEYWORDS", table)
    assert keywords._generation_kwargs().__annotations__["shift"] is float
    record = keywords.keyword_record("Processors", "processors")
    config = record(shift=0.5, repetition_penalty=1.3)
    assert record().shift is None
    built = _build(PROCESSORS, BuildContext(config, PROMPT, 3, 8, None, PROMPT.device))
    assert [type(p) for p in built] == [Shift, lp.RepetitionPenaltyLogitsProcessor]
