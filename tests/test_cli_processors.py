"""`dynaspec generate` passes transformers' generation options through to the library."""

from __future__ import annotations

import pytest

from dynaspec.cli import build_parser, generation_keywords, main


def test_only_the_options_given_are_passed_so_the_checkpoint_applies_to_the_rest() -> None:
    args = build_parser().parse_args(["generate", "x"])
    assert generation_keywords(args) == {}


def test_processor_and_stopping_options() -> None:
    argv = ["generate", "x", "--repetition-penalty", "1.3", "--no-repeat-ngram-size", "3"]
    argv += ["--stop", "\n\n", "--stop", "END", "--max-time", "2.5", "--sample", "--top-p", "0.9"]
    assert generation_keywords(build_parser().parse_args(argv)) == {
        "repetition_penalty": 1.3,
        "no_repeat_ngram_size": 3,
        "stop_strings": ["\n\n", "END"],
        "max_time": 2.5,
        "do_sample": True,
        "top_p": 0.9,
    }


def test_the_stats_line_lists_what_was_active(capsys: pytest.CaptureFixture) -> None:
    argv = ["generate", "--pair", "tiny", "--max-new-tokens", "6", "--repetition-penalty", "1.3"]
    assert main([*argv, "--stop", "zz", "--threads", "1", "Hello"]) == 0
    assert "greedy, processors: RepetitionPenalty, StopString" in capsys.readouterr().out
