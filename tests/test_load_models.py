"""One loader for `dynaspec generate`, `bench` and `oracle`: the tiny pair, the dtype rule,
the EOS ids, and the same --dtype choices and default on every subcommand."""

from __future__ import annotations

import argparse

import pytest
import torch

from dynaspec.cli import build_parser
from dynaspec.eval.bench.args import add_bench_arguments
from dynaspec.eval.oracle.args import add_oracle_arguments
from dynaspec.models.arguments import pair_name
from dynaspec.models.dtype import machine_dtype
from dynaspec.models.loading import (
    DEFAULT_DTYPE,
    DTYPE_CHOICES,
    dtype_choice,
    dtype_name,
    eos_token_ids,
    load_models,
)
from dynaspec.models.tiny import TinyPairConfig


def test_the_tiny_pair_is_float32_unless_a_dtype_is_given():
    target, draft, tokenizer = load_models("tiny")
    assert next(target.parameters()).dtype == torch.float32
    assert next(draft.parameters()).dtype == torch.float32
    assert dtype_name(None, pair="tiny") == "float32"
    target, draft, _ = load_models("tiny", dtype="bfloat16", tiny=TinyPairConfig(num_layers=1))
    assert next(target.parameters()).dtype == torch.bfloat16
    assert next(draft.parameters()).dtype == torch.bfloat16
    assert target.config.num_hidden_layers == 1
    assert dtype_name("bfloat16", pair="tiny") == "bfloat16"
    assert dtype_name(None, pair="qwen2.5-coder") == machine_dtype().name  # DEFAULT_DTYPE
    assert DEFAULT_DTYPE == "machine"
    assert dtype_choice("auto", pair="qwen2.5-coder").name == "float32"  # a GGUF's own
    assert eos_token_ids(target, tokenizer) == (tokenizer.eos_token_id,)


def test_eos_ids_fall_back_to_the_tokenizer():
    target, _, tokenizer = load_models("tiny")
    target.generation_config.eos_token_id = None
    assert eos_token_ids(target, tokenizer) == (tokenizer.eos_token_id,)
    target.generation_config.eos_token_id = [3, 4]
    assert eos_token_ids(target, tokenizer) == (3, 4)


def _subcommand_parsers() -> list[argparse.ArgumentParser]:
    bench, oracle = argparse.ArgumentParser(), argparse.ArgumentParser()
    add_bench_arguments(bench)
    add_oracle_arguments(oracle)
    generate = build_parser()._subparsers._group_actions[0].choices["generate"]  # type: ignore[union-attr]
    return [generate, bench, oracle]


@pytest.mark.parametrize("parser", _subcommand_parsers(), ids=["generate", "bench", "oracle"])
def test_every_subcommand_has_the_same_dtype_choices_and_default(parser):
    dtype = next(action for action in parser._actions if action.dest == "dtype")
    assert tuple(dtype.choices) == DTYPE_CHOICES
    assert dtype.default is None  # load_models(dtype=None): DEFAULT_DTYPE, float32 for tiny
    assert DEFAULT_DTYPE in dtype.help


@pytest.mark.parametrize("parser", _subcommand_parsers(), ids=["generate", "bench", "oracle"])
def test_every_subcommand_checks_pair_names_alike(parser):
    pair = next(action for action in parser._actions if action.dest == "pair")
    assert pair.type is pair_name  # defined once: dynaspec.models.arguments
    models = {action.dest for action in parser._actions} & {"target", "draft"}
    assert models in (set(), {"target", "draft"})  # the oracle runs presets only
