"""Speculative sampling with transformers' warpers and processors follows the processed target.

The scripted 4-token target of test_sampling.py, with a draft that mixes its distribution
with a far-off one (so drafts are often accepted, often rejected), decodes many short
sequences with each setting; the counts of whole sequences are compared by a chi-square test
with the exact distribution of the target alone, computed from transformers' own classes
applied to every prefix. The settings go through the same resolution and list building as
`dynaspec.generate`. A control with the target's rows processed without their drafted prefix
(a plausible bug) must fail the same check.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
import torch
from test_sampling import (
    ALPHA,
    DRAFT_PROBS,
    PROMPT,
    TARGET_LOGITS,
    TARGET_PROBS,
    VOCAB_SIZE,
    assert_follows_target,
    chi_square_pvalue,
)
from tiny_models import ScriptedModel, probs_logits
from transformers.generation import logits_process as lp

from dynaspec.compat.processing import full_processor_list
from dynaspec.compat.settings import resolve_settings
from dynaspec.core import sampling as sampling_module
from dynaspec.core.loop import decode
from dynaspec.core.sampling import TokenSampler
from dynaspec.core.scores import apply_processors
from dynaspec.drafters import ModelDrafter
from dynaspec.policies import ConstantPolicy

LENGTH = 2  # new tokens per sequence: 16 cells; the first round drafts 1 token
# The draft: 0.6 x the target's distribution + 0.4 x test_sampling's far-off draft.
CLOSE_DRAFT_LOGITS = [
    probs_logits([0.6 * t + 0.4 * d for t, d in zip(target, draft, strict=True)])
    for target, draft in zip(TARGET_PROBS, DRAFT_PROBS, strict=True)
]

# name -> (generate keywords, the reference: transformers' classes in generate()'s order)
CASES: dict[str, tuple[dict[str, Any], list[Any]]] = {
    "min_p": ({"min_p": 0.3}, [lp.MinPLogitsWarper(0.3)]),
    "typical_p": ({"typical_p": 0.6}, [lp.TypicalLogitsWarper(0.6)]),
    "epsilon_cutoff": ({"epsilon_cutoff": 0.15}, [lp.EpsilonLogitsWarper(0.15)]),
    "eta_cutoff": ({"eta_cutoff": 0.3}, [lp.EtaLogitsWarper(0.3)]),
    "repetition_penalty_top_p": (
        {"repetition_penalty": 2.5, "temperature": 0.9, "top_p": 0.85},
        [
            lp.RepetitionPenaltyLogitsProcessor(2.5),
            lp.TemperatureLogitsWarper(0.9),
            lp.TopPLogitsWarper(0.85),
        ],
    ),
    "no_repeat_ngram_min_p": (
        {"no_repeat_ngram_size": 1, "min_p": 0.2},
        [lp.NoRepeatNGramLogitsProcessor(1), lp.MinPLogitsWarper(0.2)],
    ),
}


def exact_distribution(reference: list[Any]) -> dict[tuple[int, ...], float]:
    """P(the target alone emits each sequence of LENGTH tokens), processed per prefix."""
    distribution = {}
    for sequence in itertools.product(range(VOCAB_SIZE), repeat=LENGTH):
        prob, prefix = 1.0, PROMPT
        for token in sequence:
            scores = TARGET_LOGITS[prefix[-1]][None].double()  # (1, V)
            for processor in reference:
                scores = processor(torch.tensor([prefix]), scores)
            prob *= float(torch.softmax(scores, -1)[0, token])
            prefix = prefix + (token,)
        distribution[sequence] = prob
    return distribution


def sample_counts(
    keywords: dict[str, Any], num_samples: int, seed: int, seed_mode: str = "stream"
) -> Counter:
    """Counts of the LENGTH new tokens over `num_samples` speculative runs (lookahead 3).
    stream: one seeded sampler for every run (rejection sampling); keyed: run i samples
    with seed `num_samples * seed + i` (coupling: a seed fixes the text)."""
    call = {"do_sample": True, "max_new_tokens": LENGTH, **keywords}
    settings = resolve_settings(call, None, None, len(PROMPT), seed, seed_mode=seed_mode)
    prompt = torch.tensor([PROMPT])
    processors = full_processor_list(
        settings.sampling, settings.processors, None, prompt, len(PROMPT), settings.limits
    )
    target = ScriptedModel(lambda prefix: TARGET_LOGITS[prefix[-1]], VOCAB_SIZE)
    draft = ScriptedModel(lambda prefix: CLOSE_DRAFT_LOGITS[prefix[-1]], VOCAB_SIZE)
    sampler = TokenSampler(settings.sampling, processors=processors)
    counts: Counter = Counter()
    with torch.inference_mode():
        for run in range(num_samples):
            if seed_mode == "keyed":
                sampling = replace(settings.sampling, seed=num_samples * seed + run)
                sampler = TokenSampler(sampling, processors=processors)
            out = decode(
                target, ModelDrafter(draft), prompt, ConstantPolicy(3), sampler, settings.limits
            )
            counts[tuple(out.sequences[0, len(PROMPT) :].tolist())] += 1
    return counts


@pytest.mark.parametrize("seed_mode", ["stream", "keyed"])
@pytest.mark.parametrize("case", list(CASES))
def test_sampled_sequences_follow_the_processed_target(case: str, seed_mode: str) -> None:
    keywords, reference = CASES[case]
    distribution = exact_distribution(reference)
    plain = exact_distribution([])
    total_variation = sum(abs(distribution[s] - plain[s]) for s in plain) / 2
    assert total_variation > 0.1, "the setting must change the distribution"
    counts = sample_counts(keywords, 600, list(CASES).index(case), seed_mode)
    pvalue = chi_square_pvalue(counts, distribution)
    assert pvalue > ALPHA, f"{case}: differs from the processed target (p={pvalue:.2e})"


def without_drafted_prefix(processors, logits, tokens, drafted):  # noqa: ANN001, ANN201
    """A broken processing: every row sees the committed tokens only, not its drafted prefix."""
    rows = [
        apply_processors(processors, logits[i : i + 1], tokens, None) for i in range(len(logits))
    ]
    return torch.cat(rows)


@pytest.mark.parametrize(("seed", "seed_mode"), [(0, "stream"), (1, "stream"), (0, "keyed")])
def test_the_check_fails_when_rows_ignore_their_drafted_prefix(
    monkeypatch: pytest.MonkeyPatch, seed: int, seed_mode: str
) -> None:
    """Row i of the verification processed without draft[:i]: the penalty misses the drafted
    token, and top-p then keeps tokens the target never emits after it."""
    keywords, reference = CASES["repetition_penalty_top_p"]
    monkeypatch.setattr(sampling_module, "apply_processors", without_drafted_prefix)
    counts = sample_counts(keywords, 600, seed, seed_mode)
    with pytest.raises(AssertionError, match="never produce|differs from the target"):
        assert_follows_target(counts, exact_distribution(reference))
