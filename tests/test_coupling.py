"""The coupling instrument (eval/coupling.py) on the tiny pair: keyed and stream runs for
every draft source, schedule and lookahead asked (and a draft with another tokenizer), each
keyed text compared with the target alone's with its seed; a broken keyed run is counted and
fails the exit status."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from dynaspec.errors import ConfigError
from dynaspec.eval import coupling

ARGS = [
    "--pair", "tiny", "--dtype", "float32", "--task", "grounded", "--n", "2", "--seeds", "1",
    "--source", "model,lookup,hybrid", "--lookahead", "3", "--schedule", "constant,adaptive",
    "--max-new-tokens", "12",
]  # fmt: skip


def test_every_keyed_text_is_the_target_alones(tmp_path):
    out = tmp_path / "coupling.json"
    assert coupling.main([*ARGS, "--batch", "1,2", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["bit_exact"] is True
    assert record["keyed_runs"] == 2 * 1 * 6 * 2  # prompts x seeds x settings x batch sizes
    assert record["keyed_differing"] == 0 and record["differences"] == []
    assert set(record["settings"]) == {
        f"{s}/{p}/3{b}"
        for s in ("model", "lookup", "hybrid")
        for p in ("constant", "adaptive")
        for b in ("", "/b2")
    }
    total = record["total"]
    assert total["keyed"]["runs"] == total["stream"]["runs"] == 24
    assert total["keyed"]["drafted"] > 0 and total["stream"]["drafted"] > 0
    assert total["keyed_over_stream"]["tokens_per_s"] > 0
    assert record["alone"]["runs"] == 2


def test_a_keyed_text_unlike_the_target_alones_is_counted_and_fails(monkeypatch, tmp_path):
    real = coupling.generate

    def broken(target, draft, *ids, **options):  # a drafted keyed run that ends otherwise
        out = real(target, draft, *ids, **options)
        if options.get("seed_mode") == "keyed":
            out.sequences[:, -1] = (out.sequences[:, -1] + 1) % 257
        return out

    monkeypatch.setattr(coupling, "generate", broken)
    out = tmp_path / "coupling.json"
    args = [*ARGS[: ARGS.index("--source")], "--max-new-tokens", "6", "--modes", "keyed"]
    assert coupling.main([*args, "--batch", "1,2", "--out", str(out)]) == 1
    record = json.loads(out.read_text())
    assert record["keyed_differing"] == record["keyed_runs"] == 4  # 2 alone, 2 in a batch
    assert {d["new_token"] for d in record["differences"]} == {5}
    assert "stream" not in record["total"]


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--source", "model,beam"),
        ("--schedule", "fast"),
        ("--lookahead", "0"),
        ("--modes", "x"),
        ("--batch", "0"),
        ("--settings", "hybrid/adaptive"),
        ("--settings", "hybrid/adaptive/0"),
        ("--settings", "beam/constant/5"),
    ],
)
def test_bad_lists_are_refused_by_name(flag, value):
    with pytest.raises(ConfigError, match=flag):
        args = coupling._arguments([flag, value])
        coupling.settings_from(args)
        coupling.modes_from(args.modes)
        coupling.batch_sizes_from(args.batch)


def test_settings_name_each_setting():
    args = coupling._arguments(["--settings", "model/constant/5,hybrid/adaptive/20"])
    assert [s.label for s in coupling.settings_from(args)] == [
        "model/constant/5",
        "hybrid/adaptive/20",
    ]


def test_fast_is_generates_bit_exact_path():
    args = coupling._arguments(["--fast"])
    assert args.static is True and args.draft_quantize == "w4a8"


def test_seeded_requests_through_the_server_are_the_target_alones():
    """Concurrent keyed requests to `dynaspec serve` (adaptive, prompt lookup, the suffix
    cache, a batch of 2): each text is the target alone's with its seed; a text unlike the
    one expected is counted."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from dynaspec.eval.coupling_serve import serve_check
    from dynaspec.generation import generate
    from dynaspec.models.tiny import tiny_pair

    target, draft, tokenizer = tiny_pair()
    pair = SimpleNamespace(target=target, draft=draft, tokenizer=tokenizer)
    prompts = [tokenizer(text, return_tensors="pt").input_ids for text in ("def f(x):", "ab")]
    sampling = {"do_sample": True, "temperature": 0.8, "top_p": 0.9, "max_new_tokens": 12}
    expected = {
        (index, seed): generate(target, None, ids, seed=seed, **sampling)
        .sequences[0, ids.shape[1] :]
        .tolist()
        for index, ids in enumerate(prompts)
        for seed in range(2)
    }
    check = serve_check(pair, prompts, 2, sampling, expected, clients=2, prompt_lookup=8)
    assert (check.requests, check.failed, check.differences) == (4, 0, [])
    assert check.new_tokens == sum(map(len, expected.values()))
    expected[1, 1] = [token + 1 for token in expected[1, 1]]
    check = serve_check(pair, prompts, 2, sampling, expected, clients=2, prompt_lookup=8)
    assert [(d["prompt"], d["seed"]) for d in check.differences] == [(1, 1)]


def cross_pair() -> SimpleNamespace:
    """A tiny byte-level target and a noisy copy of it under permuted ids with specials of
    its own: a draft with another tokenizer (tests/test_cross_tokenizer.py)."""
    from test_cross_tokenizer import bytes_tokenizer, noisy_cross_pair

    target, draft, permuted = noisy_cross_pair()
    return SimpleNamespace(
        target=target, draft=draft, tokenizer=bytes_tokenizer(), draft_tokenizer=permuted
    )


def test_a_draft_with_another_tokenizer_keeps_every_keyed_text(monkeypatch, tmp_path):
    """--draft of another tokenizer (--cross-tokenizer): alone, in a batch of 2 and from 2
    concurrent server clients, every source's keyed text is the target alone's with its seed
    (the draft drafting over the shared tokens: without its tokenizers the calls fail)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pair = cross_pair()
    prompts = [pair.tokenizer(text, return_tensors="pt").input_ids
               for text in ("def add(a, b):", "Once upon a time")]  # fmt: skip
    monkeypatch.setattr(coupling, "_pair", lambda args: pair)
    monkeypatch.setattr(coupling, "_prompts", lambda pair, task, n: prompts)
    out = tmp_path / "cross.json"
    args = [
        "--pair", "qwen2.5-coder", "--draft", "other", "--cross-tokenizer", "--seeds", "1",
        "--modes", "keyed", "--source", "model,lookup,hybrid", "--lookahead", "3",
        "--schedule", "constant,adaptive", "--batch", "1,2", "--server-clients", "2",
        "--temperature", "0.8", "--top-p", "0.9", "--max-new-tokens", "12", "--out", str(out),
    ]  # fmt: skip
    assert coupling.main(args) == 0
    record = json.loads(out.read_text())
    assert record["bit_exact"] is True and record["cross_tokenizer"] == "intersection"
    assert record["keyed_runs"] == 2 * 1 * 6 * 2  # prompts x seeds x settings x batch sizes
    assert record["keyed_differing"] == 0 and record["differences"] == []
    server = record["server"]
    assert (server["requests"], server["failed"], server["differing"]) == (2, 0, 0)
    drafted = [t["keyed"] for label, t in record["settings"].items() if "lookup" not in label]
    assert sum(t["accepted"] for t in drafted) > 0  # the other-tokenizer draft was accepted


def test_a_draft_of_another_tokenizer_loads_with_the_pairs_target(monkeypatch):
    from dynaspec.models import loading
    from dynaspec.models.presets import get_pair_preset

    calls = []
    monkeypatch.setattr(loading, "load_model_set", lambda *a, **k: calls.append((a, k)))
    flags = ["--pair", "qwen2.5-coder", "--draft", "smollm2-135m", "--cross-tokenizer", "--fast"]
    args = coupling._arguments(flags)
    coupling.check_draft(args)
    coupling._pair(args)
    [(positional, keywords)] = calls
    assert positional == () and keywords["draft"] == "smollm2-135m"
    assert keywords["target"] == get_pair_preset("qwen2.5-coder").target
    assert keywords["other_tokenizer"] is True
    # --fast: the static bf16 target; the draft as loaded (w4a8 needs widths SmolLM2 lacks)
    assert keywords["static"] is True and "draft_quantize" not in keywords
    calls.clear()
    coupling._pair(coupling._arguments([*flags, "--draft-quantize", "int8"]))
    assert calls[0][1]["draft_quantize"] == "int8"


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--cross-tokenizer"], "--cross-tokenizer acts on --draft"),
        (["--draft", "smollm2-135m"], "--draft replaces the draft of a named pair"),
    ],
)
def test_a_draft_flag_without_its_partner_is_refused(flags, words):
    with pytest.raises(ConfigError, match=words):
        coupling.check_draft(coupling._arguments(flags))
