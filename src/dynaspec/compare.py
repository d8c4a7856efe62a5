"""`dynaspec generate --compare`: the same prompt decoded by the target alone, timed, and
whether the two outputs are identical; a greedy divergence is classified as a numerical tie
or a bug (`dynaspec.mismatch`)."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import torch
from tqdm import tqdm

from dynaspec.backends.exact_linear import BitExactLinear
from dynaspec.backends.quant import PackedLinear
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


def target_alone_notice(input_ids: torch.Tensor, speculative: GenerateOutput) -> str:
    """The line said before the timed target-alone run (whose text is not printed; a bar
    counts its tokens): how many tokens, and about how long (the speculative run's target
    step times them)."""
    new_tokens = speculative.sequences.shape[1] - input_ids.shape[1]
    rounds = speculative.stats.rounds
    steps = [r.target_time_s for r in rounds if r.num_verified == 1]
    steps = steps or [r.target_time_s for r in rounds if r.num_verified == r.num_drafted + 1]
    seconds = statistics.median(steps) * new_tokens if steps else 0.0
    estimate = f", about {seconds:.0f} s" if seconds >= 1 else ""
    return (
        f"--compare: decoding the same {new_tokens} tokens with the target alone, timed, for "
        f"the speedup (its text is not printed{estimate})"
    )


class TokenBar:
    """A streamer that counts the timed target-alone run's new tokens on a progress bar
    (stderr), so that a run of half a minute is not a silence."""

    def __init__(self, total: int) -> None:
        self.bar = tqdm(total=total, desc="target alone", unit="tok", file=sys.stderr, leave=False)
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if self.prompt_seen:
            self.bar.update(value.numel())
        self.prompt_seen = True  # the first put is the prompt, as transformers' streamers get it

    def end(self) -> None:
        self.bar.close()


def compare_with_target_alone(
    target: Any, input_ids: torch.Tensor, speculative: GenerateOutput, options: dict[str, Any]
) -> str:
    """Decodes `input_ids` with the target alone (timed) and returns its summary line,
    labelled with the backend that ran it, then the speedup of `speculative` over it and
    whether the outputs are identical; a greedy divergence is explained, with both texts
    from where they part when `options` has a tokenizer."""
    bar = TokenBar(speculative.sequences.shape[1] - input_ids.shape[1])
    started = time.perf_counter()
    alone = generate(target, None, input_ids, **target_alone_options(options), streamer=bar)
    alone_s = time.perf_counter() - started
    same = torch.equal(alone.sequences, speculative.sequences)
    exact = bool(getattr(target, "bit_exact", False))
    verdict = "identical" if same else "DIFFERENT"
    if speculative.stats.do_sample:
        verdict += " (sampling: outputs differ by design; distributions are equal)"
    elif same and exact:
        verdict += f" ({BIT_EXACT_WHY})"
    elif not same and not getattr(target.config, "is_encoder_decoder", False):
        divergence = _classify(target, input_ids, alone.sequences, speculative.sequences)
        verdict = describe_divergence(divergence, bit_exact=exact)
        texts = _parting_texts(options.get("tokenizer"), input_ids, alone, speculative, divergence)
        verdict += texts
    speedup = alone_s / speculative.stats.summary().wall_time_s
    return (
        f"[target alone, {backend_words(target)}] {alone.stats.summary().line()}\n"
        f"speedup {speedup:.2f}x over the target alone; outputs {verdict}"
    )


# Why a greedy speculative output equals the target alone's on a bit-exact target (the
# static path in bf16, dynaspec's kernels): the end of the --compare line.
BIT_EXACT_WHY = (
    "bit for bit: this target's kernels give each token the same logits whether it is "
    "checked alone or among drafted tokens, so not even a tie can part them"
)


def backend_words(model: Any) -> str:
    """What runs `model`'s forwards, in words: transformers' own, or the static adapter
    with its options (the --static, --compile, --quantize flags as they took effect)."""
    fast = getattr(model, "fast", None)
    decoder = getattr(model, "decoder", None)
    if fast is None or decoder is None:
        return "transformers' forward"
    words = ["static KV cache"]
    if fast.compile:
        words.append("torch.compile")
    if fast.quantize:
        words.append(f"{fast.quantize} weights")
    elif any(isinstance(m, BitExactLinear) for m in decoder.modules()):
        words.append("bit-exact bf16 weights")
    else:
        packed = [m for m in decoder.modules() if isinstance(m, PackedLinear) and m.dense.packed]
        if packed:
            dtype = packed[0].dense.weight.dtype  # torch.float32 -> "float32"
            name = "bf16" if dtype == torch.bfloat16 else str(dtype).removeprefix("torch.")
            words.append(f"prepacked {name} weights")
    return " + ".join(words)


def _classify(
    target: Any, input_ids: torch.Tensor, alone: torch.Tensor, speculative: torch.Tensor
) -> Any:
    """Classifies a greedy divergence: a numerical tie of the target's top logits, or a bug."""
    from dynaspec.mismatch import classify_mismatch

    start = input_ids.shape[1]
    return classify_mismatch(
        target, input_ids, alone[0, start:].tolist(), speculative[0, start:].tolist()
    )


def describe_divergence(divergence: Any, bit_exact: bool = False) -> str:
    """What a greedy divergence (a classified mismatch: kind, position, dtype, steps) means,
    in a newcomer's words: the end of the --compare line, then lines that explain it. On a
    `bit_exact` target no divergence is a tie: its verification sees its steps' logits."""
    at = divergence.position
    if bit_exact:
        return (
            f"DIFFERENT from new token {at} on: this target is bit-exact (each token gets the "
            "same logits alone or in a verification), so no tie explains it. Please report "
            "this bug."
        )
    if divergence.kind != "tie":
        return (
            f"DIFFERENT from new token {at} on: NOT a tie of the target's two best tokens, "
            "so one of the outputs is not the target's own. Please report this bug."
        )
    dtype, steps = divergence.dtype, divergence.steps
    return (
        f"part at new token {at}, at a tie (not a bug)\n"
        f"  At new token {at} the target's two best next tokens scored practically the same: "
        f"both lie within {steps:.1f} {dtype} steps of the top score (logit).\n"
        f"  Speculative decoding checks several tokens in one forward, the target alone one at "
        f"a time, and the two round {dtype} a little differently, so each run picked a "
        "different one of the pair.\n"
        "  Either text is the target's own greedy output, within its precision; everything "
        f"before new token {at} is identical.\n"
        "  For output identical token for token, add --dtype float32 (slower): ties at float32 "
        "precision are vanishingly rare."
    )


SHOWN_SHARED_CHARS = 60  # the end of the common text shown before the two continuations


def _parting_texts(
    tokenizer: Any,
    input_ids: torch.Tensor,
    alone: GenerateOutput,
    speculative: GenerateOutput,
    divergence: Any,
) -> str:
    """Both continuations from the divergence on (and the end of the text they share)."""
    if tokenizer is None:
        return ""
    cut = input_ids.shape[1] + divergence.position

    def text(ids: torch.Tensor) -> str:
        return str(tokenizer.decode(ids.tolist(), skip_special_tokens=True))

    shared = text(alone.sequences[0, input_ids.shape[1] : cut])
    if len(shared) > SHOWN_SHARED_CHARS:
        shared = "..." + shared[-SHOWN_SHARED_CHARS:]
    return (
        f"\n--- the same in both, up to new token {divergence.position}:\n{shared}"
        f"\n--- speculative, from new token {divergence.position} on:\n"
        f"{text(speculative.sequences[0, cut:])}"
        f"\n--- target alone, from new token {divergence.position} on:\n"
        f"{text(alone.sequences[0, cut:])}"
    )
