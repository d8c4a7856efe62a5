"""How often the loop waits for the device: per drafted token only for policies that decide
after each token (`needs_confidence`), otherwise once per draft, and the same output."""

from __future__ import annotations

import torch
from tiny_models import ScriptedModel, shift_rule

import dynaspec
from dynaspec.policies import ConstantPolicy, DraftStep, DynamicPolicy

VOCAB_SIZE = 16


class Logged(ScriptedModel):
    """A scripted draft that logs each forward as "f" into a shared event list."""

    def __init__(self, events: list[str], **kwargs) -> None:
        rule = kwargs.pop("rule")
        inner = ScriptedModel.greedy(rule, VOCAB_SIZE)
        super().__init__(inner.logits_fn, VOCAB_SIZE)
        self.events = events

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        self.events.append("f")
        return super().forward(new_tokens, num_logits)


def logging_policy(base: type, events: list[str], *args: object) -> object:
    """An instance of `base` whose should_stop() logs "s" into `events`."""

    class Logging(base):
        def should_stop(self, step: DraftStep) -> bool:
            events.append("s")
            return super().should_stop(step)

    return Logging(*args)


def run(
    events: list[str], policy: object, eos: tuple[int, ...] = ()
) -> tuple[dynaspec.GenerateOutput, ScriptedModel]:
    target = ScriptedModel.greedy(shift_rule(1, VOCAB_SIZE), VOCAB_SIZE)
    draft = Logged(events, rule=shift_rule(1, VOCAB_SIZE))
    out = dynaspec.generate(
        target, draft, torch.tensor([[0]]), max_new_tokens=5, policy=policy, eos_token_id=list(eos)
    )
    return out, target


def test_constant_drafts_everything_before_the_policy_looks() -> None:
    events: list[str] = []
    out, _ = run(events, logging_policy(ConstantPolicy, events, 3))
    assert events[:6] == ["f", "f", "f", "s", "s", "s"]
    assert out.sequences[0].tolist() == [0, 1, 2, 3, 4, 5]


def test_dynamic_reads_each_token_before_drafting_the_next() -> None:
    events: list[str] = []
    out, _ = run(events, logging_policy(DynamicPolicy, events, 3, 0.0))
    assert events[:6] == ["f", "s", "f", "s", "f", "s"]
    assert out.sequences[0].tolist() == [0, 1, 2, 3, 4, 5]


def test_constant_never_verifies_tokens_after_a_drafted_eos() -> None:
    """The draft may run past its EOS (nothing is read back), but the target never sees it."""
    out, target = run([], ConstantPolicy(4), eos=(2,))
    assert target.calls[0] == [0, 1, 2]  # the pending token, then drafts up to the EOS
    assert out.stats.rounds[0].stop_reason == "eos"
    assert out.stats.rounds[0].num_drafted == 2
    assert out.stats.rounds[0].draft_forwards == 4
    assert out.sequences[0].tolist() == [0, 1, 2]
