"""Token-level intersection: a draft of another tokenizer proposes target tokens directly.

* The shared vocabulary: tokens of equal text map to each other whatever their ids and
  spelling ("▁the" and "Ġthe" both read " the"); partial characters and special tokens are
  left out; the draft's EOS stands for the target's.
* Sampling is lossless: scripted models over the byte tokenizer (target) and a byte-level
  BPE (draft) whose distribution puts mass on merged tokens the target does not have; the
  counts of whole sequences follow the target's exact (processed) distribution by a
  chi-square test, and fail it when the proposal's rows are laid out with a broken mapping.
* The same with prompt lookup before the draft (copied tokens are point masses).
* Greedy output equals transformers' own `target.generate` (random tiny Llamas over
  different tokenizers: tests/test_cross_tokenizer.py runs them with cross_tokenizer=).
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pytest
import torch
from test_cross_tokenizer import (
    bpe_tokenizer,
    bytes_tokenizer,
    metaspace_tokenizer,
    permuted_copy,
    permuted_tokenizer,
    printable_only,
    prompt_ids,
)
from test_sampling import ALPHA, TARGET_PROBS, chi_square_pvalue, processed
from tiny_models import ScriptedModel, hf_greedy, tiny_model

import dynaspec
from dynaspec.compat.records import SamplingConfig
from dynaspec.core.config import LimitsConfig
from dynaspec.core.loop import decode
from dynaspec.core.sampling import TokenSampler
from dynaspec.drafters import HybridDrafter, IntersectionDrafter, LookupConfig, PromptLookupDrafter
from dynaspec.drafters.cross_tokenizer import draft_eos_ids
from dynaspec.drafters.shared_vocab import shared_vocabulary, token_texts
from dynaspec.errors import ConfigError, UnsupportedOptionError
from dynaspec.policies import ConstantPolicy

LETTERS = "abcd"
# Next-letter distributions by the previous letter: the target's over the four letters are
# tests/test_sampling.py's; the draft's over the four letters and, with the last column, a
# merged token of its own that the target does not have (the restriction leaves it out).
DRAFT_PROBS = [
    [0.05, 0.05, 0.10, 0.50, 0.30],
    [0.50, 0.10, 0.10, 0.10, 0.20],
    [0.10, 0.10, 0.10, 0.40, 0.30],
    [0.15, 0.20, 0.20, 0.35, 0.10],
]


def letter_logits(tokenizer: Any, size: int, row: list[float], extra: int | None) -> torch.Tensor:
    """(size,) logits: log(row[i]) at the token of LETTERS[i], row[4] at `extra`, -1e4
    elsewhere."""
    logits = torch.full((size,), -1e4)
    for letter, prob in zip(LETTERS, row, strict=False):
        logits[tokenizer.convert_tokens_to_ids(letter)] = torch.tensor(prob).log()
    if extra is not None:
        logits[extra] = torch.tensor(row[4]).log()
    return logits


def last_letter(tokenizer: Any, prefix: tuple[int, ...]) -> int:
    """Index in LETTERS of the last character of `prefix`'s text (a letter)."""
    text = tokenizer.decode(list(prefix), skip_special_tokens=True)
    return LETTERS.index(text[-1])


def merged_token(tokenizer: Any) -> int:
    """A draft token of two or more characters (one the byte tokenizer does not have)."""
    return next(i for t, i in sorted(tokenizer.get_vocab().items()) if len(t) >= 3 and t.isalpha())


def letter_pair() -> tuple[ScriptedModel, ScriptedModel]:
    target_tok, draft_tok = bytes_tokenizer(), bpe_tokenizer()
    extra = merged_token(draft_tok)
    t_rows = [letter_logits(target_tok, len(target_tok), row, None) for row in TARGET_PROBS]
    d_rows = [letter_logits(draft_tok, len(draft_tok), row, extra) for row in DRAFT_PROBS]
    target = ScriptedModel(lambda p: t_rows[last_letter(target_tok, p)], len(target_tok))
    draft = ScriptedModel(lambda p: d_rows[last_letter(draft_tok, p)], len(draft_tok))
    return target, draft


def exact_distribution(length: int, config: SamplingConfig) -> dict[tuple[int, ...], float]:
    """P(the target alone emits these `length` byte tokens after "a"), processed."""
    tok = bytes_tokenizer()
    distribution = {}
    for letters in itertools.product(range(4), repeat=length):
        prob, previous = 1.0, 0
        for letter in letters:
            probs = processed(torch.tensor(TARGET_PROBS[previous]).log(), config)
            prob *= float(probs[letter])
            previous = letter
        ids = tuple(tok.convert_tokens_to_ids(LETTERS[i]) for i in letters)
        distribution[ids] = prob
    return distribution


def sample_sequences(
    config: SamplingConfig,
    length: int,
    num_samples: int,
    prompt_text: str = "a",
    lookup: bool = False,
) -> Counter:
    """Counts of the `length` new tokens after `prompt_text` (it ends in "a") over
    `num_samples` runs of the loop with an IntersectionDrafter (lookahead 3), with prompt
    lookup before it when `lookup` (the hybrid), one seeded sampler for all runs."""
    target_tok, draft_tok = bytes_tokenizer(), bpe_tokenizer()
    target, draft = letter_pair()
    eos = ((target_tok.eos_token_id,), draft_eos_ids(draft_tok, draft))
    shared = shared_vocabulary(target_tok, draft_tok, len(target_tok), eos)
    sampler = TokenSampler(config)
    limits = LimitsConfig(max_new_tokens=length)
    prompt = prompt_ids(target_tok, prompt_text)
    counts: Counter = Counter()
    with torch.inference_mode():
        for _ in range(num_samples):
            drafter: Any = IntersectionDrafter(draft, target_tok, draft_tok, shared, eos[1])
            if lookup:
                copier = PromptLookupDrafter(LookupConfig(3, 2), len(target_tok), eos[0])
                drafter = HybridDrafter(drafter, copier)
            out = decode(target, drafter, prompt, ConstantPolicy(3), sampler, limits)
            counts[tuple(out.sequences[0, prompt.shape[1] :].tolist())] += 1
    return counts


# ---- the shared vocabulary -------------------------------------------------------------


def test_tokens_of_equal_text_map_to_each_other_whatever_their_spelling() -> None:
    meta, bpe = metaspace_tokenizer(), bpe_tokenizer()
    meta_texts, bpe_texts = token_texts(meta), token_texts(bpe)
    assert meta_texts[" the"] == meta.convert_tokens_to_ids("▁the")
    assert bpe_texts[" the"] == bpe.convert_tokens_to_ids("Ġthe")
    shared = shared_vocabulary(meta, bpe, len(meta), ((2,), (2,)))
    to_draft = dict(zip(shared.target_ids.tolist(), shared.draft_ids.tolist(), strict=True))
    assert to_draft[meta_texts[" the"]] == bpe_texts[" the"]
    assert to_draft[2] == 2  # the EOS
    assert shared.to_draft[meta_texts[" the"]] == bpe_texts[" the"]
    assert len(set(shared.draft_ids.tolist())) == shared.size  # one to one


def test_parts_of_characters_and_special_tokens_have_no_text() -> None:
    tok = bytes_tokenizer()
    texts = token_texts(tok)
    assert len(texts) == 128  # the ASCII bytes; 128-255 are parts of characters
    assert tok.eos_token_id not in texts.values()
    assert texts["\n"] == tok.convert_tokens_to_ids("Ċ")


def test_the_scores_lay_the_drafts_logits_over_target_ids() -> None:
    meta, bpe = metaspace_tokenizer(), bpe_tokenizer()
    shared = shared_vocabulary(meta, bpe, len(meta))
    logits = torch.randn(len(bpe))
    scores = shared.scores(logits)
    assert scores.shape == (len(meta),)
    assert torch.equal(scores[shared.target_ids], logits[shared.draft_ids])
    probs = torch.softmax(scores, -1)
    outside = torch.ones(len(meta), dtype=torch.bool)
    outside[shared.target_ids] = False
    assert probs[outside].sum() == 0.0 and torch.isclose(probs.sum(), torch.tensor(1.0))


# ---- sampling follows the target ---------------------------------------------------------

CONFIGS = [
    SamplingConfig(do_sample=True, seed=0),
    SamplingConfig(do_sample=True, temperature=0.7, top_p=0.9, seed=1),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["plain", "temperature-top-p"])
def test_sampled_sequences_follow_the_target(config: SamplingConfig) -> None:
    counts = sample_sequences(config, 3, 600)
    pvalue = chi_square_pvalue(counts, exact_distribution(3, config))
    assert pvalue > ALPHA, f"sequences differ from the target's (p={pvalue:.2e})"


def test_sampled_sequences_with_prompt_lookup_follow_the_target() -> None:
    # Copies (point masses) first, the draft's shared-token proposals after them.
    config = CONFIGS[0]
    counts = sample_sequences(config, 3, 600, prompt_text="abcdbca", lookup=True)
    pvalue = chi_square_pvalue(counts, exact_distribution(3, config))
    assert pvalue > ALPHA, f"sequences differ from the target's (p={pvalue:.2e})"


def test_the_check_fails_for_a_broken_mapping(monkeypatch: pytest.MonkeyPatch) -> None:
    """The proposal's rows laid out with another mapping than its tokens (each letter's
    probability reported at the next letter's id): the same check must fail."""
    tok = bytes_tokenizer()
    ids = torch.tensor([tok.convert_tokens_to_ids(c) for c in LETTERS])
    original = IntersectionDrafter._draft_shared

    def broken(self: IntersectionDrafter, *args: Any) -> Any:
        drafted, rows, steps, reason = original(self, *args)
        for row in rows:
            row[ids] = row[ids.roll(1)].clone()
        return drafted, rows, steps, reason

    monkeypatch.setattr(IntersectionDrafter, "_draft_shared", broken)
    config = SamplingConfig(do_sample=True, seed=0)
    counts = sample_sequences(config, 3, 600)
    assert chi_square_pvalue(counts, exact_distribution(3, config)) < ALPHA


def test_generate_samples_with_another_tokenizer_and_repeats_with_its_seed() -> None:
    permuted, to_base = permuted_tokenizer()
    target = printable_only(tiny_model("llama", vocab_size=257, hidden_size=32), bytes_tokenizer())
    draft = permuted_copy(target, to_base)
    ids = prompt_ids(bytes_tokenizer(), "Once upon")
    kwargs = {"tokenizer": bytes_tokenizer(), "assistant_tokenizer": permuted,
              "do_sample": True, "max_new_tokens": 24, "num_assistant_tokens_schedule": "constant",
              "num_assistant_tokens": 4}  # fmt: skip
    first = dynaspec.generate(target, draft, ids, seed=5, **kwargs)
    again = dynaspec.generate(target, draft, ids, seed=5, cross_tokenizer="intersection", **kwargs)
    assert first.sequences.tolist() == again.sequences.tolist()
    assert sum(r.num_drafted for r in first.stats.rounds) > 0
    assert all(r.num_accepted <= r.num_drafted for r in first.stats.rounds)


# ---- greedy: the same model under other ids ----------------------------------------------


def test_the_same_model_under_other_ids_is_accepted_token_by_token() -> None:
    permuted, to_base = permuted_tokenizer()
    target = tiny_model("llama", vocab_size=257, hidden_size=32, max_length=512)
    target = printable_only(target, bytes_tokenizer())
    draft = permuted_copy(target, to_base)
    ids = prompt_ids(bytes_tokenizer(), "Once upon a time")
    out = dynaspec.generate(
        target, draft, ids, tokenizer=bytes_tokenizer(), assistant_tokenizer=permuted,
        cross_tokenizer="intersection", max_new_tokens=60, num_assistant_tokens=5,
        num_assistant_tokens_schedule="constant",
    )  # fmt: skip
    assert out.sequences.tolist() == hf_greedy(target, ids, 60).tolist()
    rounds = out.stats.rounds
    assert sum(r.num_accepted for r in rounds) >= 0.8 * sum(r.num_drafted for r in rounds)
    assert max(r.catchup for r in rounds[1:]) <= 2, [r.catchup for r in rounds]


# ---- errors ---------------------------------------------------------------------------------


def _pair_call(**kwargs: Any) -> Any:
    permuted, to_base = permuted_tokenizer()
    target = tiny_model("llama", vocab_size=257, hidden_size=32)
    return dynaspec.generate(
        target, permuted_copy(target, to_base), prompt_ids(bytes_tokenizer(), "ab"),
        tokenizer=bytes_tokenizer(), assistant_tokenizer=permuted, max_new_tokens=3, **kwargs,
    )  # fmt: skip


def test_an_unknown_method_and_sampling_through_text_name_the_way_out() -> None:
    with pytest.raises(ConfigError, match="'auto', 'string', 'intersection'"):
        _pair_call(cross_tokenizer="tokens")
    with pytest.raises(UnsupportedOptionError, match="cross_tokenizer='intersection'"):
        _pair_call(cross_tokenizer="string", do_sample=True)
