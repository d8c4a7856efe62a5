"""The suffix cache in `dynaspec serve`: on by default, scoped by the API key a request
presents, per-request draft sources, each source's decisions in the request's stats and in
/metrics; every text still generate()'s alone."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("openai")

from serve_helpers import alone_text, call, client, running_server, serve_fixtures  # noqa: E402

from dynaspec.serve.sources import scope_of  # noqa: E402

PROMPT = "def fib(n):"
NEW = 24


models, server = serve_fixtures(max_batch=2)


def chat(url: str, key: str, **extra):
    messages = [{"role": "user", "content": PROMPT}]
    answer = client(url, key).chat.completions.create(
        model="tiny", messages=messages, max_tokens=NEW, extra_body=extra or None
    )
    return answer.choices[0].message.content, answer.model_extra["dynaspec"]


def test_a_key_drafts_from_its_own_earlier_text_only(server, models) -> None:
    url, _ = server
    expected = alone_text(models[0], None, models[2], PROMPT, NEW)
    text, stats = chat(url, "alice")
    assert text == expected and stats["sources"]["suffix"]["drafted"] == 0
    text, stats = chat(url, "bob")  # alice's text is not bob's
    assert text == expected and stats["sources"]["suffix"]["drafted"] == 0
    text, stats = chat(url, "alice")
    suffix = stats["sources"]["suffix"]
    assert text == expected and suffix["drafted"] > 0 and suffix["rounds"] > 0
    assert suffix["accepted"] <= suffix["drafted"]
    assert set(stats["sources"]) == {"lookup", "suffix", "model"}


def test_a_request_limits_its_draft_sources(server, models) -> None:
    url, _ = server
    expected = alone_text(models[0], None, models[2], PROMPT, NEW)
    chat(url, "carol")
    text, stats = chat(url, "carol", draft_sources=[])  # speculation off
    assert text == expected and stats["drafted_tokens"] == 0
    text, stats = chat(url, "carol", draft_sources=["suffix"])
    assert text == expected and stats["sources"]["model"]["drafted"] == 0
    assert stats["sources"]["suffix"]["drafted"] > 0


def test_unknown_draft_sources_are_a_400(server) -> None:
    url, _ = server
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    status, _, answer = call(url, "/v1/chat/completions", {**body, "draft_sources": ["oracle"]})
    assert status == 400 and b"draft_sources" in answer


def test_metrics_per_source(server) -> None:
    url, _ = server
    chat(url, "dave")
    chat(url, "dave")
    status, _, text = call(url, "/metrics")
    assert status == 200
    assert b'dynaspec_source_drafted_tokens_total{source="suffix"}' in text
    assert b'dynaspec_source_accepted_tokens_total{source="model"}' in text
    assert b"dynaspec_suffix_cache_bytes " in text


def test_size_0_turns_the_cache_off(models) -> None:
    target, draft, tokenizer = models
    with running_server(target, draft, tokenizer, suffix_cache_mb=0) as (url, app):
        chat(url, "erin")
        _, stats = chat(url, "erin")
        assert stats["sources"]["suffix"]["drafted"] == 0
        assert app.state.engine.batch.suffix_cache is None


def test_scopes() -> None:
    assert scope_of("key", "Bearer a", "u") == scope_of("key", "Bearer a", "v")
    assert scope_of("key", "Bearer a", None) != scope_of("key", "Bearer b", None)
    assert scope_of("user", "Bearer a", "u") != scope_of("user", "Bearer a", "v")
    assert scope_of("shared", "Bearer a", "u") == scope_of("shared", None, None)
    assert "Bearer" not in scope_of("key", "Bearer a", None)


def test_a_keyed_seed_repeats_its_text_over_the_cache_drafts(server) -> None:
    """A sampled request with a (keyed, the default) seed reads the cache and still gives
    the target's text for that seed: the same text again, now partly copied."""
    url, _ = server
    settings = {"temperature": 0.8, "top_p": 0.9, "seed": 11}
    frank = client(url, "frank")
    messages = [{"role": "user", "content": PROMPT}]
    texts, stats = [], []
    for _ in range(2):
        answer = frank.chat.completions.create(
            model="tiny", messages=messages, max_tokens=NEW, **settings
        )
        texts.append(answer.choices[0].message.content)
        stats.append(answer.model_extra["dynaspec"])
    assert texts[0] == texts[1]
    assert stats[1]["sources"]["suffix"]["drafted"] > 0
