"""transformers' logits processors and stopping criteria: greedy output equals `target.generate`.

Every processor of issue 13, alone and in combinations, is run on a tiny fp32 Llama model
across schedules (dynamic, adaptive, constant) and drafts (identical weights, weights plus
noise, an unrelated model), passed as keywords or set on the target's generation_config,
and compared token for token with transformers' own greedy `generate` with the same
settings. A case that does not change the plain greedy output would prove nothing, so every
case is checked to change it on some prompt of the pool. Stop strings and stopping criteria
must end generation exactly where they trigger, also inside an accepted draft.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from tiny_models import (
    CacheCheckStreamer,
    ScriptedModel,
    hf_greedy,
    noisy_copy,
    random_prompts,
    tiny_model,
)
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation.logits_process import (
    LogitsProcessor,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
)
from transformers.generation.stopping_criteria import StoppingCriteria

import dynaspec
from dynaspec.models.tiny import byte_tokenizer

VOCAB_SIZE = 64
MAX_NEW_TOKENS = 12
EOS = [27, 54, 7]  # tokens the tiny target emits early: min-length processors then matter

# name -> transformers generate() keywords. Each changes the plain greedy output of some
# prompt of the pool (test_every_case_changes_the_greedy_output).
CASES: dict[str, dict[str, Any]] = {
    "repetition_penalty": {"repetition_penalty": 1.8},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 1},
    "min_new_tokens": {"min_new_tokens": 8, "eos_token_id": EOS},
    "min_length": {"min_length": 12, "eos_token_id": EOS},
    "suppress_tokens": {"suppress_tokens": [27, 54, 7, 18]},
    "begin_suppress_tokens": {"begin_suppress_tokens": [39, 18, 21, 54, 33]},
    "bad_words_ids": {"bad_words_ids": [[27], [38, 55], [11, 33]]},
    "sequence_bias": {"sequence_bias": {(27,): -10.0, (44,): 3.0}},
    "forced_bos_token_id": {"forced_bos_token_id": 9},
    "forced_eos_token_id": {"forced_eos_token_id": 9},
    "encoder_repetition_penalty": {"encoder_repetition_penalty": 2.0},
    "encoder_no_repeat_ngram_size": {"encoder_no_repeat_ngram_size": 1},
    "exponential_decay_length_penalty": {
        "exponential_decay_length_penalty": (3, 3.0),
        "eos_token_id": [33],
    },
    "encouraged_repeats_banned_bigrams": {"repetition_penalty": 0.6, "no_repeat_ngram_size": 2},
    "everything": {
        "repetition_penalty": 1.3,
        "no_repeat_ngram_size": 3,
        "min_new_tokens": 5,
        "eos_token_id": EOS,
        "suppress_tokens": [18],
        "bad_words_ids": [[38, 55]],
        "sequence_bias": {(44,): 2.0},
        "forced_eos_token_id": 9,
        "begin_suppress_tokens": [39],
        "renormalize_logits": True,
        "remove_invalid_values": True,
    },
}
SCHEDULES = ("dynamic", "adaptive", "constant")
DRAFT_KINDS = ("identical", "noisy", "unrelated")


def hf_reference(
    model: PreTrainedModel, prompt: torch.Tensor, max_new_tokens: int = MAX_NEW_TOKENS, **kw: Any
) -> Any:
    """transformers' own greedy generate with `kw` (no EOS unless kw names one)."""
    return hf_greedy(model, prompt, max_new_tokens, **kw)


class Zoo:
    """The tiny target, its drafts, the prompt pool, and cached references."""

    def __init__(self) -> None:
        self.target = tiny_model("llama", seed=0, vocab_size=VOCAB_SIZE)
        self.drafts = {
            "identical": noisy_copy(self.target, scale=0.0),
            "noisy": noisy_copy(self.target, scale=0.1, seed=1),
            "unrelated": tiny_model("llama", seed=1, vocab_size=VOCAB_SIZE),
        }
        self.prompts = random_prompts(6, VOCAB_SIZE, min_len=1, max_len=10, seed=7)
        self.prompts[0] = torch.tensor([[5]])  # forced_bos_token_id acts on a 1-token prompt
        self._references: dict[tuple[str, int], torch.Tensor] = {}
        self._configured: dict[str, PreTrainedModel] = {}

    def reference(self, case: str | None, prompt_index: int) -> torch.Tensor:
        key = (str(case), prompt_index)
        if key not in self._references:
            kw = CASES[case] if case is not None else {}
            self._references[key] = hf_reference(self.target, self.prompts[prompt_index], **kw)
        return self._references[key]

    def configured(self, case: str) -> PreTrainedModel:
        """A copy of the target whose generation_config sets the case (a checkpoint's config)."""
        if case not in self._configured:
            model = copy.deepcopy(self.target)
            model.generation_config = GenerationConfig(**CASES[case])
            self._configured[case] = model
        return self._configured[case]


@pytest.fixture(scope="module")
def zoo() -> Zoo:
    return Zoo()


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("draft_kind", DRAFT_KINDS)
@pytest.mark.parametrize("case", list(CASES))
def test_greedy_with_processors_equals_hf_generate(
    zoo: Zoo, case: str, draft_kind: str, schedule: str
) -> None:
    index = list(CASES).index(case) * 9 + DRAFT_KINDS.index(draft_kind) * 3
    index += SCHEDULES.index(schedule)
    prompt_index = index % len(zoo.prompts)
    via_config = index % 2 == 1  # half the grid reads the settings from generation_config
    target = zoo.configured(case) if via_config else zoo.target
    keywords = {} if via_config else CASES[case]
    out = dynaspec.generate(
        target,
        zoo.drafts[draft_kind],
        zoo.prompts[prompt_index],
        max_new_tokens=MAX_NEW_TOKENS,
        num_assistant_tokens=4,
        num_assistant_tokens_schedule=schedule,
        **keywords,
    )
    expected = zoo.reference(case, prompt_index)
    assert out.sequences.tolist() == expected.tolist(), f"prompt {prompt_index}, {keywords}"
    assert out.stats.processors, "the active processors are listed in the stats"
    if draft_kind == "identical":  # the draft's proposals are processed with the same prefix
        rounds = out.stats.rounds
        assert sum(r.num_accepted for r in rounds) == sum(r.num_drafted for r in rounds)


def test_every_case_changes_the_greedy_output(zoo: Zoo) -> None:
    """Otherwise the equality above could hold with the processor ignored."""
    for case, keywords in CASES.items():
        plain = [
            hf_reference(zoo.target, prompt, eos_token_id=keywords.get("eos_token_id"))
            for prompt in zoo.prompts
        ]
        changed = [
            zoo.reference(case, i).tolist() != plain[i].tolist() for i in range(len(zoo.prompts))
        ]
        assert any(changed), f"{case} never changes the greedy output: pick a stronger setting"


def test_the_models_generation_config_is_never_written(zoo: Zoo) -> None:
    model = zoo.configured("everything")
    before = copy.deepcopy(model.generation_config.__dict__)
    dynaspec.generate(model, zoo.drafts["noisy"], zoo.prompts[1], max_new_tokens=4)
    assert model.generation_config.__dict__ == before


class BanRecentTokens(LogitsProcessor):
    """A caller's own processor that depends on the prefix: bans the last two tokens."""

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        scores = scores.clone()
        scores[:, input_ids[0, -2:]] = -float("inf")
        return scores


@pytest.mark.parametrize("draft_kind", DRAFT_KINDS)
def test_caller_processor_objects_merge_as_in_transformers(zoo: Zoo, draft_kind: str) -> None:
    """A custom object of a built type replaces it in place; others follow the built ones."""
    prompt = zoo.prompts[2]
    custom = [RepetitionPenaltyLogitsProcessor(2.5), BanRecentTokens()]
    keywords = {"repetition_penalty": 1.1, "no_repeat_ngram_size": 3}
    expected = hf_reference(zoo.target, prompt, logits_processor=list(custom), **keywords)
    out = dynaspec.generate(
        zoo.target,
        zoo.drafts[draft_kind],
        prompt,
        max_new_tokens=MAX_NEW_TOKENS,
        num_assistant_tokens_schedule="constant",
        num_assistant_tokens=3,
        logits_processor=custom,
        **keywords,
    )
    assert out.sequences.tolist() == expected.tolist()
    assert out.stats.processors == ("RepetitionPenalty", "NoRepeatNGram", "BanRecentTokens")
    assert NoRepeatNGramLogitsProcessor not in map(type, custom)


def test_processors_on_an_encoder_decoder_pair() -> None:
    from test_encoder_decoder import family

    fam = family("t5")
    keywords = {"repetition_penalty": 1.6, "no_repeat_ngram_size": 2, "suppress_tokens": [5]}
    for prompt, draft in zip(fam.prompts[:2], ("perturbed", "unrelated"), strict=True):
        expected = fam.target.generate(
            prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=10,
            **keywords,
        )  # fmt: skip
        out = dynaspec.generate(
            fam.target, fam.drafts[draft], prompt, max_new_tokens=10, **keywords
        )
        assert out.sequences.tolist() == expected.tolist()


# ---------------------------------------------------------------------------------------
# Stop strings and stopping criteria
# ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def byte_pair() -> tuple[PreTrainedModel, PreTrainedModel, Any]:
    """A tiny target over the byte vocabulary, a nearly identical draft, and the tokenizer."""
    tokenizer = byte_tokenizer()
    target = tiny_model("llama", seed=3, vocab_size=len(tokenizer))
    return target, noisy_copy(target, scale=0.02, seed=4), tokenizer


def test_a_stop_string_ends_generation_inside_an_accepted_draft(byte_pair: tuple) -> None:
    target, draft, tokenizer = byte_pair
    prompt = torch.tensor([[72, 105, 33]])
    plain = hf_reference(target, prompt, max_new_tokens=16)[0, 3:].tolist()
    stop = tokenizer.decode(plain[6:9])  # "RIF": completed by the 9th new token
    assert stop.isascii() and stop.isprintable(), "reseed: the stop string must be plain text"
    expected = hf_reference(
        target, prompt, max_new_tokens=16, stop_strings=stop, tokenizer=tokenizer
    )
    assert expected.shape[1] == 3 + 9
    out = dynaspec.generate(
        target,
        draft,
        prompt,
        max_new_tokens=16,
        stop_strings=[stop],
        tokenizer=tokenizer,
        num_assistant_tokens=10,
        num_assistant_tokens_schedule="constant",
    )
    assert out.sequences.tolist() == expected.tolist()
    last = out.stats.rounds[-1]
    assert last.num_emitted < last.num_accepted + 1, "the cut fell inside an accepted draft"
    assert "StopString" in out.stats.processors


class StopAfter(StoppingCriteria):
    """Stops once `token` was generated (a caller's own criterion)."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        return input_ids[:, -1] == self.token


def test_a_stopping_criterion_cuts_a_draft_and_keeps_the_cache_invariant() -> None:
    """Scripted pair that agrees on everything: the criterion triggers mid-draft."""
    next_token = lambda prefix: (prefix[-1] + 1) % 16  # noqa: E731
    target = ScriptedModel.greedy(next_token, vocab_size=16)
    draft = ScriptedModel.greedy(next_token, vocab_size=16)
    streamer = CacheCheckStreamer(target, draft)
    out = dynaspec.generate(
        target,
        draft,
        torch.tensor([[0]]),
        max_new_tokens=20,
        num_assistant_tokens=8,
        num_assistant_tokens_schedule="constant",
        stopping_criteria=[StopAfter(5)],
        streamer=streamer,
        output_scores=True,
    )
    assert out.sequences.tolist() == [[0, 1, 2, 3, 4, 5]]
    assert out.stats.rounds[0].num_accepted == 8 and out.stats.rounds[0].num_emitted == 5
    assert len(out.scores) == 5 and streamer.rounds[-1] == (6, 5, 5)


def test_a_caller_criterion_equals_hf_generate(zoo: Zoo) -> None:
    prompt = zoo.prompts[3]
    plain = zoo.reference(None, 3)[0, prompt.shape[1] :].tolist()
    criterion = StopAfter(plain[6])
    expected = hf_reference(zoo.target, prompt, stopping_criteria=[criterion])
    out = dynaspec.generate(
        zoo.target, zoo.drafts["identical"], prompt, max_new_tokens=MAX_NEW_TOKENS,
        stopping_criteria=[criterion], num_assistant_tokens_schedule="constant",
    )  # fmt: skip
    assert out.sequences.tolist() == expected.tolist()
    assert out.sequences.shape[1] < prompt.shape[1] + MAX_NEW_TOKENS


# ---------------------------------------------------------------------------------------
# output_scores / output_logits
# ---------------------------------------------------------------------------------------


def test_scores_and_logits_are_transformers_own(zoo: Zoo) -> None:
    prompt = zoo.prompts[4]
    keywords = CASES["everything"]
    expected = hf_reference(
        zoo.target, prompt, output_scores=True, output_logits=True, return_dict_in_generate=True,
        **keywords,
    )  # fmt: skip
    out = dynaspec.generate(
        zoo.target, zoo.drafts["noisy"], prompt, max_new_tokens=MAX_NEW_TOKENS,
        output_scores=True, output_logits=True, return_dict_in_generate=True, **keywords,
    )  # fmt: skip
    assert out.sequences.tolist() == expected.sequences.tolist()
    assert len(out.scores) == len(expected.scores) == out.sequences.shape[1] - prompt.shape[1]
    for ours, theirs in zip(
        out.scores + out.logits, expected.scores + expected.logits, strict=True
    ):
        assert ours.shape == theirs.shape == (1, VOCAB_SIZE)
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4)


def test_without_output_flags_there_are_no_scores(zoo: Zoo) -> None:
    out = dynaspec.generate(zoo.target, None, zoo.prompts[1], max_new_tokens=3)
    assert out.scores is None and out.logits is None


# ---------------------------------------------------------------------------------------
# max_time
# ---------------------------------------------------------------------------------------


class SlowTarget(ScriptedModel):
    """Every forward advances a fake clock by `step` seconds."""

    def __init__(self, clock: list[float], step: float) -> None:
        super().__init__(lambda prefix: torch.arange(8.0), vocab_size=8)
        self.clock, self.step = clock, step

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        self.clock[0] += self.step
        return super().forward(new_tokens, num_logits)


@pytest.mark.parametrize("with_draft", [False, True])
def test_max_time_stops_at_the_first_token_after_the_deadline(
    monkeypatch: pytest.MonkeyPatch, with_draft: bool
) -> None:
    """A fake clock (each target forward takes 0.1 s): the deadline at 0.45 s is crossed by
    the 5th forward, and the first token emitted after it is the last one."""
    clock = [1000.0]
    monkeypatch.setattr("time.time", lambda: clock[0])
    target = SlowTarget(clock, step=0.1)
    draft = ScriptedModel.greedy(lambda prefix: 7, vocab_size=8) if with_draft else None
    out = dynaspec.generate(
        target, draft, torch.tensor([[7]]), max_new_tokens=100, max_time=0.45,
        num_assistant_tokens=3, num_assistant_tokens_schedule="constant",
    )  # fmt: skip
    rounds = out.stats.rounds
    assert len(rounds) == 5  # the 5th target forward ends after the deadline
    assert rounds[-1].num_emitted == 1  # and only its first token is kept
    assert out.stats.summary().new_tokens == (1 if draft is None else 4) * 4 + 1
    assert "MaxTime" in out.stats.processors


def test_max_time_stops_a_real_run_early() -> None:
    """With the real clock: a target that needs 10 ms a token stops long before 5000 tokens."""

    class Sleepy(ScriptedModel):
        def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
            import time

            time.sleep(0.01)
            return super().forward(new_tokens, num_logits)

    target = Sleepy(lambda prefix: torch.arange(8.0), vocab_size=8)
    out = dynaspec.generate(target, None, torch.tensor([[1]]), max_new_tokens=5000, max_time=0.2)
    assert out.stats.summary().new_tokens < 5000


# ---------------------------------------------------------------------------------------
# On a GPU (skipped without one): processors and criteria run where the target's logits are
# ---------------------------------------------------------------------------------------


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_processors_on_a_cuda_target_with_a_cpu_prompt(byte_pair: tuple) -> None:
    target, draft = (copy.deepcopy(m).cuda() for m in byte_pair[:2])
    tokenizer = byte_pair[2]
    prompt = torch.tensor([[72, 105, 33]])  # on the CPU, as a tokenizer returns it
    keywords = dict(CASES["everything"], eos_token_id=[40], stop_strings=["RIF"])
    expected = hf_reference(
        target, prompt.cuda(), max_new_tokens=16, tokenizer=tokenizer, **keywords
    )
    out = dynaspec.generate(
        target, draft, prompt, max_new_tokens=16, tokenizer=tokenizer, **keywords
    )
    assert out.sequences.tolist() == expected.tolist()
    sampled = dynaspec.generate(
        target, draft, prompt, max_new_tokens=16, do_sample=True, seed=0, top_p=0.9,
        repetition_penalty=1.2, min_p=0.01, output_scores=True,
    )  # fmt: skip
    assert sampled.scores[0].device.type == "cuda"
