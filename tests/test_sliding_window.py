"""Sliding-window models (backends/windows.py): Mistral-, Gemma2- and Gemma3-style tiny
models whose window is much smaller than the generation decode exactly as transformers does,
with drafts rejected past the window (the cache records what a rollback needs); where the
cache cannot roll back, the model is refused before the first token, never after."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tiny_models import hf_greedy, noisy_copy, random_prompts, tiny_model

import dynaspec
from dynaspec.backends.static import make_fast
from dynaspec.errors import UnsupportedModelError

VOCAB = 64
WINDOW = 4
NEW_TOKENS = 32  # eight windows


def window_model(kind: str, *, window: int = WINDOW, seed: int = 0) -> Any:
    """A tiny fp32 model of `kind` whose attention (all or some layers) slides over `window`."""
    import transformers

    common: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "initializer_range": 0.5,
        "sliding_window": window,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "tie_word_embeddings": False,  # tied, Gemma's scaled embedding repeats the last token
    }
    if kind == "mistral":
        config, model_class = transformers.MistralConfig(**common), "MistralForCausalLM"
    elif kind == "gemma2":  # sliding and full layers alternate
        config, model_class = transformers.Gemma2Config(head_dim=8, **common), "Gemma2ForCausalLM"
    elif kind == "gemma3":  # every layer slides (the 270m preset's first layers do)
        config = transformers.Gemma3TextConfig(
            head_dim=8, layer_types=["sliding_attention"] * 2, **common
        )
        model_class = "Gemma3ForCausalLM"
    else:
        config = transformers.Qwen2Config(use_sliding_window=True, max_window_layers=0, **common)
        model_class = "Qwen2ForCausalLM"
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config).float().eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = None
    return model


class Recorder:
    """A streamer that keeps every token it is given."""

    def __init__(self) -> None:
        self.tokens: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        self.tokens.extend(int(t) for t in value.view(-1))

    def end(self) -> None:
        pass


@pytest.mark.parametrize("kind", ["mistral", "gemma2", "gemma3", "qwen2"])
def test_sliding_window_models_equal_transformers_greedy(kind: str) -> None:
    target = window_model(kind)
    draft = noisy_copy(target, scale=0.3, seed=1)  # rejects often: rollbacks past the window
    rejected = 0
    for prompt in random_prompts(4, VOCAB, min_len=2, max_len=9, seed=2):
        reference = hf_greedy(target, prompt, NEW_TOKENS)
        out = dynaspec.generate(
            target,
            draft,
            prompt,
            max_new_tokens=NEW_TOKENS,
            num_assistant_tokens_schedule="dynamic",
        )
        assert torch.equal(out.sequences, reference)
        rejected += sum(r.num_accepted < r.num_drafted for r in out.stats.rounds)
        lookup = dynaspec.generate(
            target, None, prompt, max_new_tokens=NEW_TOKENS, prompt_lookup_num_tokens=10
        )
        assert torch.equal(lookup.sequences, reference)
    assert rejected > 4  # rollbacks past the window happened


def test_a_sliding_window_model_as_its_own_draft_past_the_window() -> None:
    target = window_model("mistral")
    prompt = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    out = dynaspec.generate(target, target, prompt, max_new_tokens=NEW_TOKENS)
    assert torch.equal(out.sequences, hf_greedy(target, prompt, NEW_TOKENS))


def test_without_past_recording_the_model_is_refused_before_the_first_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A transformers release whose window layers cannot record the past: refused in begin(),
    before the streamer sees even the prompt; a generation inside the window still runs."""
    from transformers import cache_utils

    monkeypatch.delattr(cache_utils.DynamicSlidingWindowLayer, "activate_past_recording")
    target = window_model("mistral", window=16)
    draft = noisy_copy(target, scale=0.3, seed=1)
    prompt = torch.tensor([[1, 2, 3]])
    streamer = Recorder()
    with pytest.raises(UnsupportedModelError, match=r"MistralForCausalLM.*window of 16.*under 16"):
        dynaspec.generate(target, draft, prompt, max_new_tokens=20, streamer=streamer)
    assert streamer.tokens == []
    inside = dynaspec.generate(target, draft, prompt, max_new_tokens=8)
    assert torch.equal(inside.sequences, hf_greedy(target, prompt, 8))


def test_the_static_path_refuses_a_sliding_window_up_front() -> None:
    with pytest.raises(UnsupportedModelError, match="sliding window of 4.*without static=True"):
        make_fast(window_model("qwen2"), static=True)


def test_a_draft_the_fast_path_cannot_run_stays_a_transformers_model(capsys) -> None:
    # A draft of another family (Gemma 3's sliding-window layers) beside a static target:
    # the draft keeps transformers' forward, and says so; a Llama draft gets the fast path.
    from dynaspec.backends.static import StaticAdapter
    from dynaspec.models.loading import _fast_model

    def fast_draft(model: object, name: str) -> object:
        return _fast_model(model, {"static": True, "draft": True}, name, "draft", fall_back=True)

    model = window_model("mistral")
    assert fast_draft(model, "gemma") is model
    assert "gemma: the draft runs on transformers' forward" in capsys.readouterr().err
    llama = tiny_model("llama", vocab_size=64, hidden_size=32, max_length=64)
    assert isinstance(fast_draft(llama, "l"), StaticAdapter)
    with pytest.raises(UnsupportedModelError):  # a target is refused unless told to fall back
        _fast_model(model, {"static": True}, "gemma", "target", fall_back=False)
