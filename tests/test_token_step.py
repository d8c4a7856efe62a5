"""The one-token step of a w4a8 draft (backends/token_step.py): that it computes the
layer-by-layer forward up to rounding (logits, and the keys and values it writes), that
joining q/k/v and gate/up leaves the layers' own outputs bit for bit, that it is taken only
by w4a8 drafts, uncompiled, and that a target with such a draft gives its own output."""

from __future__ import annotations

import pytest
import torch
from tiny_models import assert_speculative_equals_alone, noisy_copy, random_prompts, tiny_model

from dynaspec.backends import token_step
from dynaspec.backends.kernels.attention import KERNEL as attention_kernel
from dynaspec.backends.kernels.w4a8 import KERNEL as w4a8_kernel
from dynaspec.backends.static import make_fast

pytestmark = pytest.mark.skipif(
    not (w4a8_kernel.available() and attention_kernel.available()),
    reason=f"w4a8 kernel: {w4a8_kernel.unavailable_reason()}; "
    f"attention kernel: {attention_kernel.unavailable_reason()}",
)
ARCHS = ("qwen2", "llama")  # q/k/v with biases and without


def _model(arch: str, seed: int = 0):
    """A tiny bf16 model whose layers fit the kernels: widths of 128, heads of 32."""
    model = tiny_model(arch, vocab_size=128, hidden_size=128, num_layers=2, seed=seed)
    return model.to(torch.bfloat16)


def _draft(arch: str):
    return make_fast(_model(arch), static=True, quantize="w4a8", draft=True)


# Measured: rounding alone parts the two forwards by 0.02-0.06 (relative norm); a step
# without the residual, or rotating with the wrong sign, by 1.2-1.5.
TOLERANCE = 0.15


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm())


@pytest.mark.parametrize("arch", ARCHS)
def test_the_step_computes_the_layer_by_layer_forward_up_to_rounding(arch: str) -> None:
    draft = _draft(arch)
    step = draft._step
    assert step is not None
    prompt = torch.randint(0, 128, (20,), generator=torch.Generator().manual_seed(3))
    draft.begin(prompt[None])
    draft.forward(prompt, 1)
    for token in (5, 77, 12, 100, 3, 64):
        position = draft.num_cached
        stepped = draft.forward(torch.tensor([token]), 1)
        written = [layer[0, :, position].clone() for layer in draft._cache]
        draft.crop(position)
        draft._step = None
        layered = draft.forward(torch.tensor([token]), 1)
        draft._step = step
        assert _relative(stepped, layered) < TOLERANCE
        for mine, theirs in zip(written, draft._cache, strict=True):
            assert _relative(mine, theirs[0, :, position]) < TOLERANCE


@pytest.mark.parametrize("arch", ARCHS)
def test_joined_weights_leave_each_layer_its_own_output(monkeypatch, arch: str) -> None:
    """The step joins q/k/v and gate/up into one tensor each; the layers then hold slices
    of it: their forward over many tokens is bitwise the one of a draft that has no step,
    and the weights take the same bytes."""
    joined = _draft(arch)
    monkeypatch.setattr(token_step, "build", lambda decoder: None)
    apart = _draft(arch)
    assert joined._step is not None and apart._step is None
    assert joined.weight_bytes() == apart.weight_bytes()
    prompt = torch.randint(0, 128, (1, 30), generator=torch.Generator().manual_seed(4))
    for fast in (joined, apart):
        fast.begin(prompt)
    assert torch.equal(joined.forward(prompt[0], 30), apart.forward(prompt[0], 30))


def test_only_uncompiled_w4a8_drafts_take_the_step() -> None:
    assert make_fast(_model("qwen2"), quantize="w4a8")._step is None  # a target
    assert make_fast(_model("qwen2"), quantize="int8", draft=True)._step is None
    assert make_fast(_model("qwen2").float(), quantize="w4a8", draft=True)._step is None


@pytest.mark.parametrize("arch", ARCHS)
def test_a_target_with_a_stepping_draft_gives_its_own_output(arch: str) -> None:
    target = tiny_model(arch, vocab_size=128, hidden_size=128, num_layers=2)
    draft = noisy_copy(target, scale=0.02, seed=1).to(torch.bfloat16)
    target = target.to(torch.bfloat16)
    fast_draft = make_fast(draft, static=True, quantize="w4a8", draft=True)
    assert fast_draft._step is not None
    prompts = random_prompts(3, 128, min_len=3, max_len=10, seed=6)
    assert_speculative_equals_alone(target, fast_draft, prompts)
    assert_speculative_equals_alone(target, fast_draft, prompts, prompt_lookup_num_tokens=8)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_batch_row_drafting_alone_takes_the_step_bit_for_bit(arch: str) -> None:
    """A batch whose one row is fed one token runs the single adapter's step over that
    row's cache: its logits are the single adapter's, bit for bit (a w4a8 draft's token in
    a served request costs what it costs in generate)."""
    from dynaspec.backends.static_batch import StaticBatchAdapter

    draft = _draft(arch)
    batch = StaticBatchAdapter(draft)
    prompts = [torch.tensor([7, 8, 9, 10, 11]), torch.tensor([20, 21, 22])]
    draft.begin(prompts[1][None])
    draft.forward(prompts[1], 1)
    batch.begin(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long))
    batch.lengths = [0, 0]
    batch.forward(list(prompts), [1, 1])
    calls = []
    step = draft._step
    draft._step = lambda *args: calls.append(1) or step(*args)  # the batch's `fast` too
    for token in (5, 77, 12):
        alone = draft.forward(torch.tensor([token]), 1)
        rows = batch.forward([torch.tensor([], dtype=torch.long), torch.tensor([token])], [0, 1])
        assert rows[0].numel() == 0 and torch.equal(rows[1], alone)
    assert len(calls) == 6  # three tokens alone, three in the batch
