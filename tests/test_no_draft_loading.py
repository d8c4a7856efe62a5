"""`--no-draft` (load_models(with_draft=False)) loads the target only, never the draft."""

from __future__ import annotations

from typing import Any

import pytest

from dynaspec.models import loading
from dynaspec.models.presets import get_pair_preset


def test_a_pair_without_its_draft_loads_the_target_preset_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded: list[str] = []

    def fake_load_model(name: Any, **kwargs: Any) -> tuple[str, str]:
        loaded.append(str(name))
        return f"model {name}", "tokenizer"

    def no_pair(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the pair (with its draft) was loaded")

    # the loader's two steps (load, then the fast path), so that nothing real loads
    monkeypatch.setattr(loading, "_load_model", fake_load_model)
    monkeypatch.setattr(loading, "_fast_model", lambda model, *args, **kwargs: model)
    monkeypatch.setattr(loading, "load_pair", no_pair)
    target, draft, tokenizer = loading.load_models("qwen2.5-coder", with_draft=False)
    assert loaded == [get_pair_preset("qwen2.5-coder").target] and draft is None
    assert target == f"model {loaded[0]}" and tokenizer == "tokenizer"


def test_the_tiny_pair_without_its_draft() -> None:
    target, draft, _ = loading.load_models("tiny", with_draft=False)
    assert draft is None and target is not None
    with_draft = loading.load_models("tiny")
    assert with_draft[1] is not None
