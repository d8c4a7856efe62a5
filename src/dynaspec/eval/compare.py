"""`dynaspec generate --compare`: the same prompt decoded by the target alone, timed, and
whether the two outputs are identical; a greedy divergence is classified as a numerical tie
or a bug (`dynaspec.eval.mismatch`)."""

from __future__ import annotations

import time
from typing import Any

import torch

from dynaspec.generation import GenerateOutput, generate

WARM_UP_TOKENS = 4  # the untimed warm-up of both paths decodes at most this many tokens


def target_alone_options(options: dict[str, Any]) -> dict[str, Any]:
    """generate() keywords that decode with the target alone: `options` without prompt
    lookup (pass draft=None for the draft model)."""
    return {**options, "prompt_lookup_num_tokens": None, "max_matching_ngram_size": None}


def warm_up_both(target: Any, draft: Any, input_ids: torch.Tensor, options: dict[str, Any]) -> None:
    """An untimed run of a few tokens on each path, so neither timing pays first-call costs."""
    new_tokens = options.get("max_new_tokens") or WARM_UP_TOKENS
    warm = {"max_new_tokens": min(WARM_UP_TOKENS, new_tokens)}
    generate(target, draft, input_ids, **{**options, **warm})
    generate(target, None, input_ids, **{**target_alone_options(options), **warm})


def compare_with_target_alone(
    target: Any, input_ids: torch.Tensor, speculative: GenerateOutput, options: dict[str, Any]
) -> str:
    """Decodes `input_ids` with the target alone (timed) and returns two lines: its summary,
    then the speedup of `speculative` over it and whether the outputs are identical."""
    started = time.perf_counter()
    alone = generate(target, None, input_ids, **target_alone_options(options))
    alone_s = time.perf_counter() - started
    same = torch.equal(alone.sequences, speculative.sequences)
    verdict = "identical" if same else "DIFFERENT"
    if speculative.stats.do_sample:
        verdict += " (sampling: outputs differ by design; distributions are equal)"
    elif not same and not getattr(target.config, "is_encoder_decoder", False):
        verdict += _explain_divergence(target, input_ids, alone.sequences, speculative.sequences)
    speedup = alone_s / speculative.stats.summary().wall_time_s
    return (
        f"[target alone] {alone.stats.summary().line()}\n"
        f"speedup {speedup:.2f}x over the target alone; outputs {verdict}"
    )


def _explain_divergence(
    target: Any, input_ids: torch.Tensor, alone: torch.Tensor, speculative: torch.Tensor
) -> str:
    """Classifies a greedy divergence: a numerical tie of the target's top logits, or a bug."""
    from dynaspec.eval.mismatch import classify_mismatch

    start = input_ids.shape[1]
    divergence = classify_mismatch(
        target, input_ids, alone[0, start:].tolist(), speculative[0, start:].tolist()
    )
    return describe_divergence(divergence)


def describe_divergence(divergence: Any) -> str:
    """What a greedy divergence (a classified mismatch: kind, position, dtype, steps) means,
    as the end of the --compare line."""
    if divergence.kind == "tie":
        return (
            f" from new token {divergence.position} on, at a {divergence.dtype} tie: both "
            f"tokens' logits lie within {divergence.steps:.1f} {divergence.dtype} steps of the "
            f"target's top logit there, so either is its argmax within {divergence.dtype} "
            "precision (a forward over several tokens rounds differently from a forward over "
            "one). Not a bug; --dtype float32 makes such ties vanishingly rare."
        )
    return f" at new token {divergence.position}: NOT a numerical tie. Please report this bug."
