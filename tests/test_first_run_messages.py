"""What a newcomer sees on a first run (issue 26): a divergence at a tie explained in plain
words with both texts, the fast-path flags confirmed, the backend of each timed run named,
and a line before each long silence."""

from __future__ import annotations

import argparse
import dataclasses
from types import SimpleNamespace

import pytest
import torch

from dynaspec import cli, compare
from dynaspec.generation import generate
from dynaspec.models.tiny import tiny_pair

pytestmark = pytest.mark.usefixtures("keep_thread_count")

TIE = SimpleNamespace(kind="tie", position=3, dtype="bfloat16", steps=1.0)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    assert cli.main(list(argv)) == 0
    return capsys.readouterr()


def test_a_tie_is_explained_in_a_newcomers_words() -> None:
    text = compare.describe_divergence(TIE)
    first, *explanation = text.splitlines()
    assert first == "part at new token 3, at a tie (not a bug)"
    said = " ".join(explanation)
    assert "the target's two best next tokens scored practically the same" in said
    assert "Either text is the target's own greedy output" in said
    assert "everything before new token 3 is identical" in said
    assert "For output identical token for token, add --dtype float32" in said
    assert "DIFFERENT" not in text
    bug = SimpleNamespace(kind="BUG", position=5, dtype="float32", steps=40.0)
    assert "Please report this bug" in compare.describe_divergence(bug)


def test_compare_shows_both_continuations_from_where_they_part(monkeypatch) -> None:
    target, _, tokenizer = tiny_pair()
    prompt = tokenizer("ab", return_tensors="pt").input_ids
    alone = generate(target, None, prompt, max_new_tokens=8)
    sequences = alone.sequences.clone()
    start = prompt.shape[1] + TIE.position
    parted = tokenizer("xxxxx", add_special_tokens=False).input_ids
    sequences[0, start:] = torch.tensor(parted)  # the speculative text parts here
    speculative = dataclasses.replace(alone, sequences=sequences)
    monkeypatch.setattr(compare, "_classify", lambda *args: TIE)
    options = {"max_new_tokens": 8, "tokenizer": tokenizer}
    lines = compare.compare_with_target_alone(target, prompt, speculative, options)
    text = lines.split("\n", 1)[1]
    decode = tokenizer.decode
    shared = decode(alone.sequences[0, prompt.shape[1] : start], skip_special_tokens=True)
    theirs = decode(alone.sequences[0, start:], skip_special_tokens=True)
    assert f"--- the same in both, up to new token 3:\n{shared}\n" in text
    assert "--- speculative, from new token 3 on:\nxxxxx\n" in text
    assert text.endswith(f"--- target alone, from new token 3 on:\n{theirs}")


def test_the_first_line_confirms_the_fast_path_flags(capsys) -> None:
    argv = ["generate", "--pair", "tiny", "--max-new-tokens", "4", "--compare", "hi"]
    out, err = run_cli(capsys, *argv, "--static", "--draft-quantize", "int8")
    assert out.splitlines()[0].endswith(
        "; fast path: target static KV cache; draft static KV cache + int8 weights"
    )
    assert "\n[target alone, static KV cache + prepacked float32 weights] " in out
    assert "--compare: decoding the same 4 tokens with the target alone, timed" in err
    assert "building the fast path's copies of their weights" in err  # before that silence
    out, err = run_cli(capsys, *argv)
    assert "fast path" not in out.splitlines()[0] and "fast path" not in err
    assert "\n[target alone, transformers' forward] " in out


def test_the_backend_names_what_it_ran() -> None:
    from dynaspec.backends.static import make_fast

    target, _, _ = tiny_pair()
    assert compare.backend_words(target) == "transformers' forward"
    quantized = make_fast(target, static=True, quantize="int8")
    assert compare.backend_words(quantized) == "static KV cache + int8 weights"
    bf16 = make_fast(tiny_pair()[0].to(torch.bfloat16), static=True)
    modules = list(bf16.decoder.modules())
    exact = any(isinstance(m, compare.BitExactLinear) for m in modules)
    packed = any(isinstance(m, compare.PackedLinear) for m in modules)
    weights = " + bit-exact bf16 weights" if exact else " + prepacked bf16 weights"
    expected = "static KV cache" + (weights if exact or packed else "")
    assert compare.backend_words(bf16) == expected


def test_version(capsys) -> None:
    from dynaspec import __version__

    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"dynaspec {__version__}"


def test_every_generate_option_says_what_it_does() -> None:
    parser = cli.build_parser()
    [subparsers] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    generate_options = subparsers.choices["generate"]._actions
    unexplained = [
        action.option_strings
        for action in generate_options
        if action.option_strings and (not action.help or action.help.startswith("("))
    ]
    assert unexplained == []  # --max-new-tokens said only its default


def test_load_pair_frees_the_targets_weights_before_the_draft_loads(monkeypatch) -> None:
    """The fast path's peak holds the target twice (its weights and their prepacked or
    quantized copy) while the adapter is built, never that and the draft as well."""
    import gc
    import weakref

    from dynaspec.models import cache as model_cache
    from dynaspec.models import loading

    alive_when_the_draft_loads: list[bool] = []
    originals: list[weakref.ref] = []

    def load_preset(preset, **_):
        target, draft, tokenizer = tiny_pair()
        if preset.role == "target":
            originals.append(weakref.ref(target.model.layers[0].mlp.gate_proj.weight))
            return target, tokenizer
        gc.collect()
        alive_when_the_draft_loads.append(originals[0]() is not None)
        return draft, tokenizer

    monkeypatch.setattr(model_cache, "is_complete_folder", lambda folder: True)
    monkeypatch.setattr(loading, "load_preset", load_preset)
    pair = loading.load_pair(dtype="float32", quantize="int8")
    assert alive_when_the_draft_loads == [False]
    assert compare.backend_words(pair.target) == "static KV cache + int8 weights"


def test_the_timed_target_alone_run_counts_its_tokens_on_a_bar(capsys, monkeypatch) -> None:
    target, _, tokenizer = tiny_pair()
    prompt = tokenizer("ab", return_tensors="pt").input_ids
    speculative = generate(target, None, prompt, max_new_tokens=6)
    counted = []

    class Counting(compare.TokenBar):
        def end(self) -> None:
            counted.append(self.bar.n)
            super().end()

    monkeypatch.setattr(compare, "TokenBar", Counting)
    compare.compare_with_target_alone(target, prompt, speculative, {"max_new_tokens": 6})
    assert counted == [6]  # the new tokens, not the prompt
    assert "target alone" in capsys.readouterr().err


def test_building_a_fast_copy_shows_a_bar_over_the_layers(capsys) -> None:
    from dynaspec.backends.static import make_fast

    target, _, _ = tiny_pair()
    make_fast(target, static=True, progress="tiny: fast copy of the weights")
    assert "tiny: fast copy of the weights" in capsys.readouterr().err
    make_fast(tiny_pair()[0], static=True)
    assert capsys.readouterr().err == ""
