"""`dynaspec generate --prompts-file FILE --batch-size N`: one JSON line per prompt, in the
file's order, each row's tokens those of the prompt generated alone; bad files and flags are
refused before the models load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from dynaspec.cli import main
from dynaspec.prompts import left_padded, read_prompts

PROMPTS = ["def fib(n):", '{"prompt": "def add(a, b):"}', "", "class Stack:", "x = [1, 2, 3"]


def test_batched_lines_are_each_prompts_own_output(tmp_path: Path, capsys) -> None:
    path = tmp_path / "prompts.jsonl"
    path.write_text("\n".join(PROMPTS) + "\n")
    common = ["generate", "--pair", "tiny", "--max-new-tokens", "10", "--prompts-file", str(path)]
    assert main([*common, "--batch-size", "3"]) == 0
    batched = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main([*common, "--batch-size", "1"]) == 0
    alone = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["index"] for r in batched] == [0, 1, 2, 3]
    assert [r["prompt"] for r in batched] == [
        "def fib(n):",
        "def add(a, b):",
        "class Stack:",
        "x = [1, 2, 3",
    ]
    assert [r["tokens"] for r in batched] == [r["tokens"] for r in alone]
    assert all(r["stats"]["new_tokens"] == len(r["tokens"]) == 10 for r in batched)
    assert main([*common, "--batch-size", "3", "--static"]) == 0  # the fast path batches too
    fast = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["tokens"] for r in fast] == [r["tokens"] for r in alone]


def test_left_padding() -> None:
    ids, mask = left_padded([torch.tensor([[5, 6, 7]]), torch.tensor([[8]])], pad=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]


@pytest.mark.parametrize(
    "text,words",
    [("\n\n", "holds no prompt"), ('{"text": "x"}\n', '"prompt"'), ('{"prompt": ""}\n', "empty")],
)
def test_bad_prompts_files(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(Exception, match=words):
        read_prompts(path)


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--batch-size", "4", "hello"], "--batch-size acts with --prompts-file"),
        (["--prompts-file", "PATH", "hello"], "not both"),
        (["--prompts-file", "PATH", "--compare"], "--compare"),
        (["--prompts-file", "nowhere.txt"], "no such file"),
        (["--prompts-file", "PATH", "--batch-size", "0"], "--batch-size"),
        (["--prompts-file", "PATH", "--batch-size", "2", "--compile"], "drop it"),
    ],
)
def test_flags_are_checked_before_the_models_load(tmp_path: Path, capsys, extra, words) -> None:
    path = tmp_path / "p.txt"
    path.write_text("hello\n")
    argv = ["generate", "--pair", "tiny", *[str(path) if a == "PATH" else a for a in extra]]
    assert main(argv) == 2
    assert words in capsys.readouterr().err
