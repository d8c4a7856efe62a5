"""Prompt lookup and the hybrid on scripted models: transformers' match semantics, the
edge cases (no match, a match at the end, EOS in a continuation, max_new_tokens inside a
continuation), the cache invariants, and the draft model carrying on after a copy."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import CacheCheckStreamer, ScriptedModel, shift_rule
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

import dynaspec
from dynaspec.core.config import SpecConfig
from dynaspec.core.round import DraftOptions, DraftPlan
from dynaspec.drafters import HybridDrafter, PromptLookupDrafter, lookup_config, make_drafter
from dynaspec.drafters.prompt_lookup import LookupConfig, find_match, point_masses
from dynaspec.errors import ConfigError
from dynaspec.policies import ConstantPolicy, DraftStep, DynamicPolicy

VOCAB_SIZE = 16


def hf_candidates(tokens: list[int], num_tokens: int, ngram: int, eos: list[int]) -> list[int]:
    """transformers' own prompt lookup: the candidate tokens it proposes after `tokens`."""
    generator = PromptLookupCandidateGenerator(
        eos_token_id=torch.tensor(eos) if eos else None,
        num_output_tokens=num_tokens,
        max_matching_ngram_size=ngram,
        max_length=10_000,
    )
    candidates, _ = generator.get_candidates(torch.tensor([tokens]))
    return candidates[0, len(tokens) :].tolist()


def ours(tokens: list[int], num_tokens: int, ngram: int, eos: list[int]) -> list[int]:
    config = LookupConfig(num_tokens, ngram, match="leftmost")
    match = find_match(torch.tensor(tokens), config, torch.tensor(eos, dtype=torch.long))
    return match.continuation.tolist() if match is not None else []


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 4), min_size=1, max_size=30),
    num_tokens=st.integers(1, 6),
    ngram=st.integers(1, 4),
    eos=st.sampled_from([[], [0], [1, 3]]),
)
def test_find_match_proposes_what_transformers_proposes(
    tokens: list[int], num_tokens: int, ngram: int, eos: list[int]
) -> None:
    assert ours(tokens, num_tokens, ngram, eos) == hf_candidates(tokens, num_tokens, ngram, eos)


def brute_force_longest(tokens: list[int], num_tokens: int, ngram: int, eos: list[int]):
    """(continuation, agreement) from the leftmost of the earlier occurrences of the longest
    matching suffix n-gram that agree furthest back (at most 32 tokens), by loops."""
    total = len(tokens)
    for size in range(min(ngram, total - 1), 0, -1):
        starts = [s + size for s in range(total - size) if tokens[s : s + size] == tokens[-size:]]
        if not starts:
            continue

        def agreement(start: int) -> int:
            count = 0
            while count < min(32, start) and tokens[start - 1 - count] == tokens[-1 - count]:
                count += 1
            return count

        best = max(starts, key=lambda start: (agreement(start), -start))
        continuation = []
        for token in tokens[best : best + num_tokens]:
            if token in eos:
                break
            continuation.append(token)
        return (continuation, agreement(best)) if continuation else None
    return None


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 4), min_size=1, max_size=60),
    num_tokens=st.integers(1, 6),
    ngram=st.integers(1, 4),
    eos=st.sampled_from([[], [0], [1, 3]]),
)
def test_the_longest_match_is_the_occurrence_that_agrees_furthest_back(
    tokens: list[int], num_tokens: int, ngram: int, eos: list[int]
) -> None:
    config = LookupConfig(num_tokens, ngram)
    match = find_match(torch.tensor(tokens), config, torch.tensor(eos, dtype=torch.long))
    found = (match.continuation.tolist(), match.agreement) if match is not None else None
    assert found == brute_force_longest(tokens, num_tokens, ngram, eos)
    leftmost = find_match(
        torch.tensor(tokens), LookupConfig(num_tokens, ngram, match="leftmost"), torch.tensor(eos)
    )
    if match is not None and leftmost is not None:
        assert match.agreement >= leftmost.agreement


def test_find_match_by_hand() -> None:
    config = LookupConfig(prompt_lookup_num_tokens=3, max_matching_ngram_size=2)
    # "1 2" occurs at 0 and 5; the one at 5 agrees on "5 1 2", the leftmost on "1 2" only
    text = torch.tensor([1, 2, 3, 9, 5, 1, 2, 4, 8, 5, 1, 2])
    longest = find_match(text, config, torch.empty(0, dtype=torch.long))
    assert longest.continuation.tolist() == [4, 8, 5] and longest.agreement == 3
    config = replace(config, match="leftmost")
    no_eos = torch.empty(0, dtype=torch.long)
    # "7 8" occurs at 1 and 5: the leftmost wins; it agrees on 3 tokens back (6 7 8).
    match = find_match(torch.tensor([6, 7, 8, 9, 6, 7, 8]), config, no_eos)
    assert match.continuation.tolist() == [9, 6, 7] and match.agreement == 3
    # No earlier "5 2", but an earlier "2": the 1-gram is the fallback.
    match = find_match(torch.tensor([2, 4, 5, 2]), config, no_eos)
    assert match.continuation.tolist() == [4, 5, 2] and match.agreement == 1
    # A match at the end: the continuation is cut by the end of the text.
    match = find_match(torch.tensor([1, 2, 3, 1, 2]), config, no_eos)
    assert match.continuation.tolist() == [3, 1, 2] and match.agreement == 2
    match = find_match(torch.tensor([3, 3]), config, no_eos)
    assert match.continuation.tolist() == [3] and match.agreement == 1
    # No match at all, and a match followed at once by EOS: nothing to copy.
    assert find_match(torch.tensor([1, 2, 3, 4]), config, no_eos) is None
    assert find_match(torch.tensor([1]), config, no_eos) is None
    assert find_match(torch.tensor([5, 9, 5]), config, torch.tensor([9])) is None
    # EOS inside the continuation: cut before it.
    match = find_match(torch.tensor([5, 6, 9, 5]), config, torch.tensor([9]))
    assert match.continuation.tolist() == [6]


def test_point_masses_are_one_hot_rows() -> None:
    rows = point_masses(torch.tensor([2, 0]), 4)
    assert rows.tolist() == [[0, 0, 1, 0], [1, 0, 0, 0]] and rows.dtype == torch.float32


def test_lookup_config_and_api_errors() -> None:
    with pytest.raises(ConfigError, match="prompt_lookup_num_tokens must be an int >= 1"):
        LookupConfig(prompt_lookup_num_tokens=0)
    with pytest.raises(ConfigError, match="match must be one of 'longest', 'leftmost'"):
        LookupConfig(match="rightmost")
    with pytest.raises(ConfigError, match="max_matching_ngram_size must be an int >= 1"):
        lookup_config(prompt_lookup_num_tokens=3, max_matching_ngram_size=0)
    with pytest.raises(ConfigError, match="pass prompt_lookup_num_tokens too"):
        lookup_config(None, max_matching_ngram_size=3)
    target = ScriptedModel.greedy(shift_rule(1, 8), 8)
    with pytest.raises(ConfigError, match="prompt_lookup_num_tokens must be an int >= 1"):
        dynaspec.generate(target, None, torch.tensor([[1]]), prompt_lookup_num_tokens=0)
    assert lookup_config(None, None) is None and make_drafter(None, 8, ()) is None
    assert lookup_config(3, None) == LookupConfig(3, 2, match="longest")
    constant = SpecConfig(num_assistant_tokens_schedule="constant")
    assert lookup_config(3, 1, constant) == LookupConfig(3, 1, match="leftmost")
    assert isinstance(make_drafter(None, 8, (), LookupConfig(3)), PromptLookupDrafter)
    assert isinstance(make_drafter(target, 8, (), LookupConfig(3)), HybridDrafter)


# ---------------------------------------------------------------------------------------
# Prompt lookup alone on scripted targets
# ---------------------------------------------------------------------------------------


def cycle_rule(period: int) -> object:
    """Counts 0, 1, ..., period-1, 0, 1, ...: text that repeats, so copies are right."""
    return lambda prefix: (prefix[-1] + 1) % period


def target_alone(rule, prompt, max_new_tokens: int, eos: int | list[int]) -> list[int]:  # noqa: ANN001
    """What the target decodes alone: the reference every run is compared with."""
    eos = [eos] if isinstance(eos, int) else eos
    tokens = list(prompt)
    while len(tokens) - len(prompt) < max_new_tokens:
        tokens.append(rule(tuple(tokens)))
        if tokens[-1] in eos:
            break
    return tokens


def lookup_alone(target_rule, prompt, **kwargs):  # noqa: ANN001, ANN201
    target = ScriptedModel.greedy(target_rule, VOCAB_SIZE)
    streamer = CacheCheckStreamer(target)
    kwargs.setdefault("eos_token_id", [])
    kwargs.setdefault("prompt_lookup_num_tokens", 4)
    out = dynaspec.generate(target, None, torch.tensor([prompt]), streamer=streamer, **kwargs)
    expected = target_alone(target_rule, prompt, kwargs["max_new_tokens"], kwargs["eos_token_id"])
    assert out.sequences[0].tolist() == expected
    assert target.num_cached == len(expected) - 1
    return out, target


def rounds(out: dynaspec.GenerateOutput) -> list[tuple[int, int, int]]:
    return [(r.num_copied, r.num_accepted, r.num_emitted) for r in out.stats.rounds]


def test_copies_are_accepted_when_the_text_repeats() -> None:
    out, target = lookup_alone(
        cycle_rule(3), (0, 1, 2, 0), max_new_tokens=9, num_assistant_tokens_schedule="constant"
    )
    # Round 1: "0" matched at 0, copies 1 2 0 (the end cuts the fourth): all right + 1.
    # Round 2: "0 1" at 0 (transformers' leftmost occurrence) offers 2 0 1 2.
    assert rounds(out) == [(3, 3, 4), (4, 4, 5)]
    assert target.calls == [[0, 1, 2, 0, 1, 2, 0], [1, 2, 0, 1, 2]]
    assert all(r.draft_forwards == 0 and r.num_drafted == r.num_copied for r in out.stats.rounds)
    assert all(r.confidences == (1.0,) * r.num_copied for r in out.stats.rounds)


def test_adaptive_copies_from_the_occurrence_that_agrees_furthest_back() -> None:
    # Round 2 of the test above: "0 1" occurs at 0 (agreeing on 2 tokens back) and at 3
    # (agreeing on 5: "0 1 2 0 1"); under adaptive the copy comes from the second, whose
    # continuation the end of the text cuts at 3 tokens, so a third round is needed.
    out, _ = lookup_alone(cycle_rule(3), (0, 1, 2, 0), max_new_tokens=9)
    assert rounds(out) == [(3, 3, 4), (3, 3, 4), (0, 0, 1)]
    assert [r.agreement for r in out.stats.rounds[:2]] == [1, 5]


def test_no_match_is_the_target_alone() -> None:
    out, target = lookup_alone(shift_rule(1, VOCAB_SIZE), (0,), max_new_tokens=8)
    assert rounds(out) == [(0, 0, 1)] * 8
    assert all(len(call) == 1 for call in target.calls[1:])


def test_wrong_copies_are_rejected() -> None:
    # The prompt repeats "1 2" then "1": lookup copies "2 ..." but the target says 5.
    out, _ = lookup_alone(lambda p: 5 if p[-1] == 1 else 1, (1, 2, 3, 1), max_new_tokens=4)
    assert out.stats.rounds[0].num_copied == 3 and out.stats.rounds[0].num_accepted == 0


def test_eos_in_a_continuation_is_not_copied_and_still_stops() -> None:
    # The prompt holds "... 1 2 9 ..." with 9 the EOS: a copy after "1" is cut before 9,
    # and the target's own EOS ends the generation exactly there.
    out, target = lookup_alone(cycle_rule(10), (0, 1, 2, 9, 0), max_new_tokens=12, eos_token_id=9)
    assert out.sequences[0].tolist() == [0, 1, 2, 9, 0, *range(1, 10)]
    # "0" matched at 0: copies 1 2 (right), not the 9 that follows them.
    assert rounds(out)[0] == (2, 2, 3)
    assert all(9 not in call for call in target.calls[1:])  # EOS is the target's own token


@pytest.mark.parametrize("max_new_tokens", range(1, 8))
def test_max_new_tokens_inside_a_continuation(max_new_tokens: int) -> None:
    out, _ = lookup_alone(
        cycle_rule(4), (0, 1, 2, 3, 0, 1), max_new_tokens=max_new_tokens, prompt_lookup_num_tokens=8
    )
    assert out.stats.summary().new_tokens == max_new_tokens
    # The copy is cut to the room left (minus the target's own token): never past the limit.
    assert all(r.num_drafted <= max_new_tokens - 1 for r in out.stats.rounds)
    assert out.stats.rounds[0].num_drafted == min(4, max_new_tokens - 1)


# ---------------------------------------------------------------------------------------
# The hybrid on scripted models
# ---------------------------------------------------------------------------------------


class RecordingPolicy(DynamicPolicy):
    """Dynamic, recording every DraftStep it is shown."""

    def __init__(self, num_assistant_tokens: int) -> None:
        super().__init__(num_assistant_tokens, 0.0)
        self.steps: list[DraftStep] = []

    def should_stop(self, step: DraftStep) -> bool:
        self.steps.append(step)
        return False


class DraftCheckStreamer(CacheCheckStreamer):
    """Also checks that the draft's cache holds committed tokens only after every round."""

    def put(self, value: torch.Tensor) -> None:
        super().put(value)
        if self.rounds:
            cached = self.draft.cached
            assert cached == self.tokens[: len(cached)], (cached, self.tokens)


def hybrid(target_rule, draft_rule, prompt, policy, **kwargs):  # noqa: ANN001, ANN201
    target = ScriptedModel.greedy(target_rule, VOCAB_SIZE)
    draft = ScriptedModel.greedy(draft_rule, VOCAB_SIZE)
    streamer = DraftCheckStreamer(target, draft)
    kwargs.setdefault("eos_token_id", [])
    kwargs.setdefault("prompt_lookup_num_tokens", 3)
    out = dynaspec.generate(
        target, draft, torch.tensor([prompt]), policy=policy, streamer=streamer, **kwargs
    )
    expected = target_alone(target_rule, prompt, kwargs["max_new_tokens"], kwargs["eos_token_id"])
    assert out.sequences[0].tolist() == expected
    return out, target, draft


def test_the_model_carries_on_after_a_copy() -> None:
    rule = cycle_rule(5)
    policy = RecordingPolicy(num_assistant_tokens=6)
    out, target, draft = hybrid(rule, rule, (0, 1, 2, 3, 4, 0), policy, max_new_tokens=7)
    first = out.stats.rounds[0]
    # 3 copied (1 2 3), then the model drafts 6 - 3 = 3 more, all right: 7 tokens emitted.
    assert (first.num_copied, first.num_drafted, first.num_accepted) == (3, 6, 6)
    # The model's first forward is fed the prompt and the three copied tokens ...
    assert draft.calls[0] == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    # ... and the policy sees its tokens as the 4th to 6th of the round, at their positions.
    assert [(s.index, s.position) for s in policy.steps] == [(3, 9), (4, 10), (5, 11)]
    assert first.draft_forwards == 3


def test_no_match_is_the_draft_model_alone() -> None:
    rule = shift_rule(1, VOCAB_SIZE)
    out, _, draft = hybrid(rule, rule, (0,), ConstantPolicy(3), max_new_tokens=8)
    assert all(r.num_copied == 0 for r in out.stats.rounds)
    assert [r.num_drafted for r in out.stats.rounds] == [3, 3]
    assert draft.calls[0] == [0]


class OfferRecorder(ConstantPolicy):
    """Constant, recording what the sources offer before every round."""

    def __init__(self, num_assistant_tokens: int) -> None:
        super().__init__(num_assistant_tokens)
        self.offers: list[DraftOptions] = []

    def plan(self, options: DraftOptions, remaining: int | None) -> DraftPlan:
        self.offers.append(options)
        return super().plan(options, remaining)


def test_the_hybrid_offers_whether_its_draft_has_run() -> None:
    rule = cycle_rule(5)
    policy = OfferRecorder(5)  # 3 copied, then the model drafts 2
    hybrid(rule, rule, (0, 1, 2, 3, 4, 0), policy, max_new_tokens=12)
    first, later = policy.offers[0], policy.offers[1:]
    assert (first.catchup, first.started, first.num_copy) == (6, False, 3)  # the prompt
    assert later and all(offer.started for offer in later)


def test_rejected_copy_leaves_no_uncommitted_token_in_the_draft() -> None:
    # The copy is wrong at once; the model (fed the copy) drafts after it. The streamer
    # checks after every round that the draft holds committed tokens only.
    target_rule = lambda p: 7 if p[-1] == 1 else (p[-1] + 1) % VOCAB_SIZE  # noqa: E731
    draft_rule = shift_rule(1, VOCAB_SIZE)
    out, target, draft = hybrid(
        target_rule, draft_rule, (1, 2, 3, 1), ConstantPolicy(5), max_new_tokens=10
    )
    first = out.stats.rounds[0]
    assert (first.num_copied, first.num_accepted) == (3, 0)
    assert first.num_drafted == 5 and first.draft_forwards == 2
    assert draft.num_cached <= out.sequences.shape[1] - 1


def test_eos_drafted_by_the_model_after_a_copy() -> None:
    rule = cycle_rule(6)
    prompt = (0, 1, 2, 3, 0)
    out, _, draft = hybrid(rule, rule, prompt, ConstantPolicy(8), max_new_tokens=12, eos_token_id=5)
    assert out.sequences[0].tolist() == [*prompt, 1, 2, 3, 4, 5]
    # Copies 1 2 3; the model drafts 4 and its EOS 5, and stops there: all accepted.
    [record] = out.stats.rounds
    assert (record.num_copied, record.num_drafted, record.num_accepted) == (3, 5, 5)
    assert record.stop_reason == "eos" and record.num_emitted == 5
    assert draft.calls[0] == [*prompt, 1, 2, 3]


@pytest.mark.parametrize("draft_flag", [["--no-draft"], []])
def test_cli_prompt_lookup(capsys: pytest.CaptureFixture[str], draft_flag: list[str]) -> None:
    from dynaspec.cli import main

    argv = ["generate", "--pair", "tiny", "--max-new-tokens", "12", "--compare", *draft_flag]
    assert main([*argv, "--prompt-lookup", "4", "--max-matching-ngram-size", "3", "ab ab ab"]) == 0
    out = capsys.readouterr().out
    assert ("[prompt lookup]" if draft_flag else "+ prompt lookup]") in out
    assert "outputs identical" in out


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_same_rounds_as_transformers_prompt_lookup(arch: str) -> None:
    """With a schedule that copies the whole continuation (not the adaptive one), dynaspec's
    prompt lookup drafts and accepts exactly what transformers' does, round by round."""
    from tiny_models import tiny_model

    from dynaspec.eval.hf_peer import HFPeer

    target = tiny_model(arch, seed=0, vocab_size=VOCAB_SIZE)
    peer = HFPeer(target)
    copied = 0
    for prompt in ([[1, 2, 3, 1, 2]], [[5, 5, 5, 6]], [[3, 9, 4]]):
        input_ids = torch.tensor(prompt)
        theirs = peer.generate(
            input_ids,
            max_new_tokens=40,
            eos_token_id=None,
            pad_token_id=0,
            prompt_lookup_num_tokens=4,
        )
        ours = dynaspec.generate(
            target,
            None,
            input_ids,
            max_new_tokens=40,
            eos_token_id=[],
            num_assistant_tokens_schedule="constant",
            prompt_lookup_num_tokens=4,
        )
        assert ours.sequences.tolist() == theirs.sequences.tolist()
        # The same rounds until the room left cuts a copy: then transformers copies one token
        # more (it cuts after verifying; dynaspec never drafts what cannot be emitted).
        reasons = [r.stop_reason for r in ours.stats.rounds]
        same = reasons.index("length") if "length" in reasons else len(reasons)
        assert same >= 10
        drafted = [r.num_drafted for r in ours.stats.rounds]
        assert drafted[:same] == theirs.drafted_per_round[:same]
        accepted = [r.num_accepted for r in ours.stats.rounds]
        assert accepted[:same] == theirs.accepted_per_round[:same]
        copied += sum(accepted[:same])
    assert copied > 0
