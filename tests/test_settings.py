"""Which settings a call uses (the call over the checkpoint's generation_config, dynaspec's
defaults where neither speaks), what is refused with a typed error, and the drop-in path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from tiny_models import noisy_copy, tiny_model
from transformers import GenerationConfig, WatermarkingConfig
from transformers.generation import logits_process as lp

import dynaspec
from dynaspec.compat.keywords import KEYWORDS
from dynaspec.compat.processing import full_processor_list
from dynaspec.compat.records import ProcessorConfig, SamplingConfig
from dynaspec.compat.settings import resolve_settings
from dynaspec.core.config import LimitsConfig
from dynaspec.core.sampling import TokenSampler
from dynaspec.errors import ConfigError, InputError, UnsupportedOptionError

PROMPT = torch.tensor([[3, 9, 4]])
# What Qwen2.5-Instruct checkpoints ship in generation_config.json (plus a length).
CHECKPOINT = {
    "do_sample": True,
    "temperature": 0.7,
    "top_p": 0.8,
    "top_k": 20,
    "repetition_penalty": 1.05,
    "max_new_tokens": 7,
    "eos_token_id": [5, 6],
}


@pytest.fixture(scope="module")
def target() -> Any:
    return tiny_model("llama", seed=0, vocab_size=64)


@pytest.fixture(scope="module")
def checkpoint(target: Any) -> Any:
    """A target whose generation_config sets what a hub checkpoint sets."""
    model = copy.deepcopy(target)
    model.generation_config = GenerationConfig(**CHECKPOINT)
    return model


def test_the_checkpoints_settings_apply_when_the_call_is_silent(checkpoint: Any) -> None:
    settings = resolve_settings({}, checkpoint, None, input_length=3, seed=None)
    assert settings.sampling == SamplingConfig(do_sample=True, temperature=0.7, top_k=20, top_p=0.8)
    assert settings.processors == ProcessorConfig(repetition_penalty=1.05)
    assert settings.limits == LimitsConfig(max_new_tokens=7, eos_token_ids=(5, 6))


def test_the_call_overrides_the_checkpoint_and_none_switches_off(checkpoint: Any) -> None:
    call = {"do_sample": False, "top_k": None, "repetition_penalty": 1.0, "max_new_tokens": 4}
    settings = resolve_settings(call, checkpoint, None, input_length=3, seed=None)
    assert not settings.sampling.do_sample and settings.sampling.top_k is None
    assert settings.sampling.top_p == 0.8  # not passed: the checkpoint's
    assert settings.processors.repetition_penalty == 1.0  # neutral: no processor is built
    assert settings.limits.max_new_tokens == 4


def test_a_passed_generation_config_is_a_clean_slate(checkpoint: Any) -> None:
    settings = resolve_settings({}, checkpoint, GenerationConfig(), input_length=3, seed=None)
    assert settings.sampling == SamplingConfig()
    assert settings.processors == ProcessorConfig()
    assert settings.limits == LimitsConfig(max_new_tokens=128, eos_token_ids=(5, 6))  # eos kept


def test_dynaspecs_defaults_not_transformers_fallbacks(target: Any) -> None:
    """No max_length=20, no top_k=50: greedy, 128 new tokens."""
    settings = resolve_settings({"do_sample": True}, target, None, input_length=3, seed=1)
    assert settings.sampling == SamplingConfig(do_sample=True, seed=1, seed_mode="keyed")
    assert settings.limits.max_new_tokens == 128


def test_max_length_counts_the_input_and_yields_to_max_new_tokens(target: Any) -> None:
    assert resolve_settings({"max_length": 10}, target, None, 3, None).limits.max_new_tokens == 7
    call = {"max_length": 10, "max_new_tokens": 2}
    assert resolve_settings(call, target, None, 3, None).limits.max_new_tokens == 2
    with pytest.raises(ConfigError, match="max_new_tokens"):
        resolve_settings({"max_length": 3}, target, None, 3, None)


def test_a_checkpoint_that_asks_for_sampling_samples(checkpoint: Any, target: Any) -> None:
    def run(seed: int) -> list[int]:
        # A fixed schedule: with adaptive, which rounds draft follows measured times, so one
        # seed repeats only on an equally quiet machine (README, "Seeded sampling").
        out = dynaspec.generate(
            checkpoint,
            target,
            PROMPT,
            max_new_tokens=10,
            seed=seed,
            num_assistant_tokens_schedule="dynamic",
        )
        assert out.stats.do_sample and "sampling" in out.stats.summary().line()
        return out.sequences[0].tolist()

    first = run(0)
    assert run(0) == first
    assert any(run(seed) != first for seed in range(1, 5))
    greedy = dynaspec.generate(
        checkpoint, target, PROMPT, max_new_tokens=4, generation_config=GenerationConfig()
    )
    assert not greedy.stats.do_sample and greedy.stats.processors == ()


def test_the_stats_line_lists_the_active_processors(target: Any) -> None:
    out = dynaspec.generate(
        target, None, PROMPT, max_new_tokens=3, repetition_penalty=1.2, max_time=60.0
    )
    assert out.stats.processors == ("RepetitionPenalty", "MaxTime")
    summary = out.stats.summary()
    assert summary.processors == out.stats.processors
    assert "greedy, processors: RepetitionPenalty, MaxTime" in summary.line()
    assert summary.to_dict()["processors"] == ("RepetitionPenalty", "MaxTime")


def test_drop_in_for_transformers_assisted_generation(target: Any) -> None:
    """The very keywords of target.generate(..., assistant_model=draft): the same output."""
    draft = noisy_copy(target, scale=0.1, seed=1)
    kwargs = dict(
        attention_mask=torch.ones_like(PROMPT),
        max_new_tokens=12,
        do_sample=False,
        repetition_penalty=1.4,
        no_repeat_ngram_size=2,
        pad_token_id=0,
        return_dict_in_generate=True,
        output_scores=True,
    )
    expected = target.generate(PROMPT, assistant_model=copy.deepcopy(draft), **kwargs)
    out = dynaspec.generate(target, draft, PROMPT, **kwargs)
    assert out.sequences.tolist() == expected.sequences.tolist()
    assert len(out.scores) == len(expected.scores) == 12


# ---------------------------------------------------------------------------------------
# Typed errors
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "keywords,match",
    [
        ({"num_beams": 3}, "num_beams=1"),
        ({"num_return_sequences": 2}, "once per sequence"),
        ({"guidance_scale": 1.5}, "guidance_scale=None"),
        ({"watermarking_config": WatermarkingConfig()}, "watermarking_config=None"),
    ],
)
def test_what_cannot_be_reproduced_is_refused(target: Any, keywords: dict, match: str) -> None:
    with pytest.raises(UnsupportedOptionError, match=match):
        dynaspec.generate(target, None, PROMPT, **keywords)


def test_a_refusal_names_the_checkpoint_as_the_source(target: Any) -> None:
    model = copy.deepcopy(target)
    model.generation_config = GenerationConfig(num_beams=4)
    with pytest.raises(UnsupportedOptionError, match=r"num_beams=4 \(set by the target's"):
        dynaspec.generate(model, None, PROMPT)
    out = dynaspec.generate(model, None, PROMPT, max_new_tokens=2, num_beams=1)
    assert out.sequences.shape == (1, 5)


@pytest.mark.parametrize(
    "processor",
    [
        lp.UnbatchedClassifierFreeGuidanceLogitsProcessor(1.5, model=None),
        lp.WatermarkLogitsProcessor(vocab_size=64, device="cpu"),
    ],
)
def test_processors_that_run_the_model_or_keep_state_are_refused(
    target: Any, processor: Any
) -> None:
    with pytest.raises(UnsupportedOptionError, match="target.generate"):
        dynaspec.generate(target, None, PROMPT, max_new_tokens=2, logits_processor=[processor])


def test_the_attention_mask_must_not_pad(target: Any) -> None:
    with pytest.raises(UnsupportedOptionError, match="unpadded"):
        dynaspec.generate(target, None, PROMPT, attention_mask=torch.tensor([[0, 1, 1]]))
    with pytest.raises(InputError, match="shape"):
        dynaspec.generate(target, None, PROMPT, attention_mask=torch.ones(1, 4))
    plain = dynaspec.generate(target, None, PROMPT, max_new_tokens=3)
    masked = dynaspec.generate(
        target, None, PROMPT, max_new_tokens=3, attention_mask=torch.ones_like(PROMPT)
    )
    assert masked.sequences.tolist() == plain.sequences.tolist()


@pytest.mark.parametrize(
    "keywords,match",
    [
        ({"repetiton_penalty": 1.2}, "did you mean repetition_penalty"),
        ({"repetition_penalty": -1.0}, "repetition_penalty=-1.0 is invalid"),
        ({"min_p": 2.0}, "min_p must lie in"),
        ({"do_sample": True, "typical_p": 0.0}, "typical_p=0.0 is invalid"),
        ({"max_time": -1.0}, "max_time must be >= 0"),
        ({"stop_strings": ["\n"]}, "tokenizer="),
    ],
)
def test_bad_settings_raise_config_errors_in_the_callers_words(
    target: Any, keywords: dict, match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        dynaspec.generate(target, None, PROMPT, **{"max_new_tokens": 2, **keywords})


# ---------------------------------------------------------------------------------------
# The processor list
# ---------------------------------------------------------------------------------------

EVERYTHING = dict(
    sequence_bias={(4,): 1.0},
    encoder_repetition_penalty=1.2,
    repetition_penalty=1.1,
    no_repeat_ngram_size=2,
    encoder_no_repeat_ngram_size=3,
    bad_words_ids=[[7]],
    min_new_tokens=2,
    forced_bos_token_id=1,
    forced_eos_token_id=2,
    remove_invalid_values=True,
    exponential_decay_length_penalty=(2, 1.1),
    suppress_tokens=[8],
    begin_suppress_tokens=[9],
    do_sample=True,
    temperature=0.8,
    top_h=0.9,
    top_k=5,
    top_p=0.9,
    min_p=0.05,
    typical_p=0.9,
    epsilon_cutoff=0.01,
    eta_cutoff=0.01,
    renormalize_logits=True,
)


def test_the_list_has_transformers_order(target: Any) -> None:
    """Checked against transformers' own (private) builder where this version has it."""
    if not hasattr(target, "_get_logits_processor") or not hasattr(
        target, "_prepare_special_tokens"
    ):
        pytest.skip("this transformers version has no private processor builder to compare")
    custom = [lp.RepetitionPenaltyLogitsProcessor(3.0), lp.InfNanRemoveLogitsProcessor()]
    settings = resolve_settings(
        {**EVERYTHING, "eos_token_id": [2], "max_new_tokens": 5}, target, None, 3, None
    )
    ours = full_processor_list(
        settings.sampling, settings.processors, custom, PROMPT, 3, settings.limits
    )
    config = GenerationConfig(
        **EVERYTHING, eos_token_id=[2], max_length=3 + 5, min_length=3 + 2
    )  # as transformers' _prepare_generated_length leaves it
    target._prepare_special_tokens(config, device="cpu")
    theirs = target._get_logits_processor(
        generation_config=config,
        input_ids_seq_length=3,
        encoder_input_ids=PROMPT,
        logits_processor=lp.LogitsProcessorList(custom),
        device="cpu",
        model_kwargs={},
    )
    assert [type(p) for p in ours] == [type(p) for p in theirs]
    assert ours[2] is custom[0]  # the caller's object replaced the built one in place


def test_the_order_check_covers_every_processor_of_the_table() -> None:
    """A keyword added to compat/keywords.py with a processor is checked against transformers'
    order once it is in EVERYTHING (min_length: set by min_new_tokens there, as transformers
    sets it)."""
    staged = {keyword.name for keyword in KEYWORDS if keyword.stage is not None}
    assert staged - set(EVERYTHING) == {"min_length"}


def test_no_processors_is_a_fast_path() -> None:
    """Plain greedy decoding does no processing at all: the logits pass through untouched."""
    sampler = TokenSampler(SamplingConfig())
    logits = torch.randn(3, 10, dtype=torch.bfloat16)
    assert sampler.process(logits, torch.tensor([1, 2]), torch.tensor([3, 4])) is logits


def test_the_benchmarks_neutral_settings_switch_a_checkpoint_off(checkpoint: Any) -> None:
    """The keywords the benchmark gives transformers' generate() work here too, so it can
    give every method the same neutral settings whatever the checkpoint ships."""
    from dynaspec.eval.hf_peer import NEUTRAL_GREEDY_KWARGS

    out = dynaspec.generate(checkpoint, None, PROMPT, max_new_tokens=4, **NEUTRAL_GREEDY_KWARGS)
    assert out.stats.processors == () and not out.stats.do_sample
