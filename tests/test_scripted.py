"""The decoding loop on scripted fake models: exact control over what the draft gets right.

A scripted model's argmax is a function of the prefix, so a test decides exactly which
drafted tokens the target accepts (none, some, all) and where EOS and the length limit
fall. Every run also checks the cache invariants after every round (CacheCheckStreamer)
and compares the per-round records with a plain-Python model of greedy speculative
decoding (`reference_rounds`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import CacheCheckStreamer, NextTokenFn, ScriptedModel, shift_rule

import dynaspec
from dynaspec.policies import ConstantPolicy, DraftStep, OraclePolicy, Round

VOCAB_SIZE = 16


@dataclass(frozen=True)
class ExpectedRound:
    num_drafted: int
    num_accepted: int
    num_emitted: int


def reference_rounds(
    target_rule: NextTokenFn,
    draft_rule: NextTokenFn,
    prompt: Sequence[int],
    lookaheads: Sequence[int] | int,
    max_new_tokens: int,
    eos: Sequence[int] = (),
) -> tuple[list[int], list[ExpectedRound]]:
    """Greedy speculative decoding in plain Python with a fixed lookahead per round.

    Returns (tokens, rounds). Each round drafts min(lookahead, room - 1) tokens (stopping
    after a drafted EOS), accepts the prefix agreeing with the target, adds the target's
    token, and cuts at EOS / length.
    """
    tokens = list(prompt)
    rounds = []
    index = 0
    while True:
        room = max_new_tokens - (len(tokens) - len(prompt))
        wanted = lookaheads if isinstance(lookaheads, int) else lookaheads[index]
        index += 1
        drafted: list[int] = []
        for _ in range(min(wanted, room - 1)):
            drafted.append(draft_rule(tuple(tokens + drafted)))
            if drafted[-1] in eos:
                break
        accepted = 0
        while accepted < len(drafted) and drafted[accepted] == target_rule(
            tuple(tokens + drafted[:accepted])
        ):
            accepted += 1
        new = drafted[:accepted] + [target_rule(tuple(tokens + drafted[:accepted]))]
        new = new[:room]
        hits = [i for i, token in enumerate(new) if token in eos]
        if hits:
            new = new[: hits[0] + 1]
        tokens += new
        rounds.append(ExpectedRound(len(drafted), accepted, len(new)))
        if hits or len(tokens) - len(prompt) >= max_new_tokens:
            return tokens, rounds


def target_alone(rule: NextTokenFn, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        tokens.append(rule(tuple(tokens)))
    return tokens


def run(
    target_rule: NextTokenFn,
    draft_rule: NextTokenFn,
    prompt: Sequence[int] = (0,),
    **kwargs,
) -> tuple[dynaspec.GenerateOutput, ScriptedModel, ScriptedModel, CacheCheckStreamer]:
    """generate() on two scripted models, checking the cache invariants every round."""
    target = ScriptedModel.greedy(target_rule, VOCAB_SIZE)
    draft = ScriptedModel.greedy(draft_rule, VOCAB_SIZE)
    streamer = CacheCheckStreamer(target, draft)
    kwargs.setdefault("num_assistant_tokens_schedule", "constant")
    kwargs.setdefault("eos_token_id", [])
    out = dynaspec.generate(target, draft, torch.tensor([prompt]), streamer=streamer, **kwargs)
    assert streamer.tokens == out.sequences[0].tolist()
    assert len(streamer.rounds) == len(out.stats.rounds)
    return out, target, draft, streamer


def observed(out: dynaspec.GenerateOutput) -> list[ExpectedRound]:
    return [ExpectedRound(r.num_drafted, r.num_accepted, r.num_emitted) for r in out.stats.rounds]


def test_all_drafted_tokens_accepted() -> None:
    rule = shift_rule(1, VOCAB_SIZE)
    out, target, draft, streamer = run(rule, rule, max_new_tokens=12, num_assistant_tokens=3)
    assert out.sequences[0].tolist() == list(range(13))
    assert observed(out) == [ExpectedRound(3, 3, 4)] * 3
    assert [r.stop_reason for r in out.stats.rounds] == ["max"] * 3
    # The draft never ran its last drafted token: one behind the target after every round...
    assert [d for _, _, d in streamer.rounds] == [length - 2 for length, _, _ in streamer.rounds]
    # ...and catches up next round by feeding the two tokens it has not seen.
    assert draft.calls[3] == [3, 4] and draft.calls[6] == [7, 8]
    # One verification forward per round: the pending token plus the three drafted ones.
    assert target.calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    summary = out.stats.summary()
    assert summary.acceptance_rate == 1.0 and summary.mean_accepted_per_round == 3.0
    assert summary.target_forwards == 3 and summary.draft_forwards == 9


def test_no_drafted_token_accepted() -> None:
    out, target, draft, streamer = run(
        shift_rule(1, VOCAB_SIZE),
        shift_rule(2, VOCAB_SIZE),
        max_new_tokens=6,
        num_assistant_tokens=3,
    )
    assert out.sequences[0].tolist() == list(range(7))
    rounds = observed(out)
    assert rounds[:3] == [ExpectedRound(3, 0, 1)] * 3
    # Near the end the room left caps the draft: 2, 1, then 0 tokens ("length").
    assert rounds[3:] == [ExpectedRound(2, 0, 1), ExpectedRound(1, 0, 1), ExpectedRound(0, 0, 1)]
    assert [r.stop_reason for r in out.stats.rounds] == ["max"] * 3 + ["length"] * 3
    assert all(d == length - 1 for length, _, d in streamer.rounds[:-1])
    assert out.stats.summary().acceptance_rate == 0.0


def test_some_drafted_tokens_accepted() -> None:
    """The draft is wrong exactly at positions divisible by 4."""
    target_rule = shift_rule(1, VOCAB_SIZE)

    def draft_rule(prefix: tuple[int, ...]) -> int:
        return (prefix[-1] + (2 if len(prefix) % 4 == 0 else 1)) % VOCAB_SIZE

    out, _, _, _ = run(
        target_rule, draft_rule, prompt=(0, 1), max_new_tokens=14, num_assistant_tokens=5
    )
    tokens, expected = reference_rounds(target_rule, draft_rule, (0, 1), 5, 14)
    assert out.sequences[0].tolist() == tokens == target_alone(target_rule, (0, 1), 14)
    assert observed(out) == expected
    # Positions 2,3 agree, 4 does not: the first round keeps 2 drafted tokens + the target's.
    assert expected[0] == ExpectedRound(5, 2, 3)
    assert 0 < sum(r.num_accepted for r in expected) < sum(r.num_drafted for r in expected)


def test_eos_inside_an_accepted_draft() -> None:
    rule = shift_rule(1, VOCAB_SIZE)
    out, target, draft, streamer = run(
        rule, rule, max_new_tokens=20, num_assistant_tokens=8, eos_token_id=5
    )
    assert out.sequences[0].tolist() == [0, 1, 2, 3, 4, 5]
    [record] = out.stats.rounds
    # The draft stops at its own EOS: nothing after it could ever be emitted.
    assert (record.num_drafted, record.num_accepted, record.num_emitted) == (5, 5, 5)
    assert record.stop_reason == "eos"
    assert out.stats.summary().new_tokens == 5
    assert target.num_cached == 5 and draft.num_cached <= 5
    assert streamer.ended


def test_eos_as_the_targets_own_token() -> None:
    """EOS right after a rejection: it is the token the target adds, and generation stops."""
    target_rule = shift_rule(1, VOCAB_SIZE)
    draft_rule = shift_rule(2, VOCAB_SIZE)
    out, _, _, _ = run(
        target_rule, draft_rule, max_new_tokens=20, num_assistant_tokens=4, eos_token_id=[9, 2]
    )
    assert out.sequences[0].tolist() == [0, 1, 2]
    # Round 1: the draft proposes 2, an EOS, and stops there. Round 2: 3, 5, 7, 9 (EOS).
    assert observed(out) == [ExpectedRound(1, 0, 1), ExpectedRound(4, 0, 1)]


@pytest.mark.parametrize("max_new_tokens", range(1, 11))
def test_max_new_tokens_is_exact_with_an_always_right_draft(max_new_tokens: int) -> None:
    rule = shift_rule(1, VOCAB_SIZE)
    out, _, draft, _ = run(rule, rule, max_new_tokens=max_new_tokens, num_assistant_tokens=4)
    assert out.sequences[0].tolist() == list(range(max_new_tokens + 1))
    # The draft never even proposes a token past the limit.
    proposed = sum(r.num_drafted for r in out.stats.rounds)
    fed_to_draft = sum(len(call) for call in draft.calls)
    assert fed_to_draft <= max_new_tokens
    # Rounds of 4 drafted + 1: the last round is cut by the length unless 5 divides the limit.
    assert out.stats.rounds[-1].stop_reason == ("length" if max_new_tokens % 5 else "max")
    _, expected = reference_rounds(rule, rule, (0,), 4, max_new_tokens)
    assert observed(out) == expected and proposed == sum(r.num_drafted for r in expected)


def test_stop_reason_length_when_one_token_is_left() -> None:
    """With room for one token only the target runs; the draft was stopped by the length."""
    rule = shift_rule(1, VOCAB_SIZE)
    out, _, _, _ = run(rule, rule, max_new_tokens=6, num_assistant_tokens=4)
    assert observed(out) == [ExpectedRound(4, 4, 5), ExpectedRound(0, 0, 1)]
    assert [r.stop_reason for r in out.stats.rounds] == ["max", "length"]


def test_dynamic_policy_stops_on_low_confidence() -> None:
    """The draft is unsure exactly at odd positions: every round stops at the first one."""
    rule = shift_rule(1, VOCAB_SIZE)
    target = ScriptedModel.greedy(rule, VOCAB_SIZE)
    draft = ScriptedModel.greedy(
        rule, VOCAB_SIZE, confidence=lambda prefix: 0.3 if len(prefix) % 2 else 0.95
    )
    streamer = CacheCheckStreamer(target, draft)
    out = dynaspec.generate(
        target,
        draft,
        torch.tensor([[0, 1, 2, 3]]),
        max_new_tokens=9,
        num_assistant_tokens=10,
        assistant_confidence_threshold=0.5,
        num_assistant_tokens_schedule="dynamic",
        eos_token_id=[],
        streamer=streamer,
    )
    # Position 4 is sure, 5 is not: draft 2 (the unsure one is still sent), accept 2, +1.
    assert observed(out)[:2] == [ExpectedRound(2, 2, 3), ExpectedRound(1, 1, 2)]
    assert out.stats.rounds[0].stop_reason == "confidence"
    assert out.stats.rounds[0].confidences == pytest.approx((0.95, 0.3))
    assert out.sequences[0].tolist() == list(range(13))


def test_dynamic_threshold_zero_never_stops_early() -> None:
    rule = shift_rule(1, VOCAB_SIZE)
    target = ScriptedModel.greedy(rule, VOCAB_SIZE)
    draft = ScriptedModel.greedy(shift_rule(3, VOCAB_SIZE), VOCAB_SIZE, confidence=0.07)
    out = dynaspec.generate(
        target,
        draft,
        torch.tensor([[0]]),
        max_new_tokens=8,
        num_assistant_tokens=3,
        assistant_confidence_threshold=0.0,
        num_assistant_tokens_schedule="dynamic",
        eos_token_id=[],
    )
    assert [r.num_drafted for r in out.stats.rounds[:5]] == [3] * 5
    assert all(r.stop_reason != "confidence" for r in out.stats.rounds)


class AlternatingPolicy(ConstantPolicy):
    """Drafts nothing every other round, so the draft falls several tokens behind."""

    name = "alternating"

    def __init__(self, lookahead: int) -> None:
        super().__init__(lookahead)
        self.round = 0

    def max_lookahead(self, catchup: int = 1, remaining: int | None = None) -> int:
        return self.num_assistant_tokens if self.round % 2 else 0

    def update(self, round: Round) -> None:
        self.round += 1


def test_draft_catches_up_after_rounds_without_drafting() -> None:
    target_rule = shift_rule(1, VOCAB_SIZE)

    def draft_rule(prefix: tuple[int, ...]) -> int:
        return (prefix[-1] + (2 if len(prefix) % 3 == 0 else 1)) % VOCAB_SIZE

    out, _, draft, _ = run(target_rule, draft_rule, max_new_tokens=12, policy=AlternatingPolicy(3))
    lookaheads = [0, 3] * 12
    tokens, expected = reference_rounds(target_rule, draft_rule, (0,), lookaheads, 12)
    assert out.sequences[0].tolist() == tokens
    assert observed(out) == expected
    assert out.stats.rounds[0].stop_reason == "none"
    assert len(draft.calls[0]) == 2  # prompt + the token of the draft-less round


def test_oracle_policy_drafts_the_agreeing_run_plus_one() -> None:
    target_rule = shift_rule(1, VOCAB_SIZE)

    def draft_rule(prefix: tuple[int, ...]) -> int:
        return (prefix[-1] + (2 if len(prefix) % 4 == 0 else 1)) % VOCAB_SIZE

    reference = target_alone(target_rule, (0,), 14)
    out, _, _, _ = run(
        target_rule, draft_rule, max_new_tokens=14, policy=OraclePolicy(reference, max_tokens=20)
    )
    assert out.sequences[0].tolist() == reference
    for record in out.stats.rounds:
        if record.stop_reason == "oracle":
            assert record.num_drafted == record.num_accepted + 1
    assert [r.stop_reason for r in out.stats.rounds].count("oracle") >= 2


def test_target_alone_on_scripted_model() -> None:
    rule = shift_rule(3, VOCAB_SIZE)
    target = ScriptedModel.greedy(rule, VOCAB_SIZE)
    streamer = CacheCheckStreamer(target)
    out = dynaspec.generate(
        target, None, torch.tensor([[1, 2]]), max_new_tokens=5, streamer=streamer
    )
    assert out.sequences[0].tolist() == target_alone(rule, (1, 2), 5)
    assert observed(out) == [ExpectedRound(0, 0, 1)] * 5
    assert [r.stop_reason for r in out.stats.rounds] == ["none"] * 5
    assert target.calls == [[1, 2], [5], [8], [11], [14]]


# A random next-token table indexed by (last token, position mod 3).
tables = st.lists(st.integers(0, VOCAB_SIZE - 1), min_size=3 * VOCAB_SIZE, max_size=3 * VOCAB_SIZE)


def table_rule(table: list[int]) -> NextTokenFn:
    return lambda prefix: table[3 * prefix[-1] + len(prefix) % 3]


@settings(max_examples=60, deadline=None)
@given(
    target_table=tables,
    draft_flips=st.lists(st.booleans(), min_size=3 * VOCAB_SIZE, max_size=3 * VOCAB_SIZE),
    prompt=st.lists(st.integers(0, VOCAB_SIZE - 1), min_size=1, max_size=5),
    lookahead=st.integers(1, 6),
    max_new_tokens=st.integers(1, 12),
    eos=st.lists(st.integers(0, VOCAB_SIZE - 1), max_size=2),
)
def test_random_scripts_match_the_reference_loop(
    target_table: list[int],
    draft_flips: list[bool],
    prompt: list[int],
    lookahead: int,
    max_new_tokens: int,
    eos: list[int],
) -> None:
    """Any draft, any limits: target-alone output, reference records, invariants hold."""
    draft_table = [
        (token + 1) % VOCAB_SIZE if flip else token
        for token, flip in zip(target_table, draft_flips, strict=True)
    ]
    target_rule, draft_rule = table_rule(target_table), table_rule(draft_table)
    out, _, _, _ = run(
        target_rule,
        draft_rule,
        prompt=tuple(prompt),
        max_new_tokens=max_new_tokens,
        num_assistant_tokens=lookahead,
        eos_token_id=eos,
    )
    tokens, expected = reference_rounds(
        target_rule, draft_rule, prompt, lookahead, max_new_tokens, eos
    )
    assert out.sequences[0].tolist() == tokens
    assert observed(out) == expected
    new_tokens = tokens[len(prompt) :]
    assert len(new_tokens) <= max_new_tokens
    assert not set(new_tokens[:-1]) & set(eos)
    if not set(new_tokens) & set(eos):
        assert len(new_tokens) == max_new_tokens


def test_draft_step_positions_are_sequence_indices() -> None:
    """DraftStep.position is where the token would land in the committed sequence."""
    seen: list[DraftStep] = []

    class Recording(ConstantPolicy):
        def should_stop(self, step: DraftStep) -> bool:
            seen.append(step)
            return False

    rule = shift_rule(1, VOCAB_SIZE)
    run(rule, rule, prompt=(0, 1, 2), max_new_tokens=4, policy=Recording(3))
    assert [(s.index, s.position, s.token) for s in seen] == [(0, 3, 3), (1, 4, 4), (2, 5, 5)]
    assert all(s.confidence == pytest.approx(0.9) for s in seen)
