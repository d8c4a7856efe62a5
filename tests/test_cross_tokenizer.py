"""A draft with another tokenizer than the target's drafts through text, losslessly.

Four tokenizers, all built here with `tokenizers` (nothing downloaded): the byte-level one of
the tiny pair (256 bytes + </s>), a byte-level BPE with merges trained on CORPUS and its
special tokens first (and a <s> before every text), a SentencePiece-like Metaspace BPE
(spaces as "▁", the first one dropped in decoding), and the byte tokenizer's tokens under
permuted ids after two specials of its own.

* Random tiny Llamas over different tokenizers: greedy output equals transformers' own
  `target.generate(...)` for prompts with words split differently, runs of whitespace and
  multi-byte characters, with the three schedules.
* Scripted models that follow a known story: the draft proposes the story's text in its own
  tokens, and most of it is accepted, including the target's EOS when the draft's ends it.
* The permuted byte tokenizer with a draft that is the target with its rows permuted: the
  same function under other ids, so nearly every drafted token is accepted, and the draft's
  cache is kept from round to round (a catch-up of a token or two).
* With prompt lookup (the hybrid): copied target tokens first, the draft carrying on after
  them through text; the same equality, and with the permuted draft copies and the draft's
  tokens accepted in one round.
* The typed errors: sampling, missing tokenizers, a tokenizer larger than its model, batches.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import pytest
import torch
from tiny_models import ScriptedModel, hf_greedy, noisy_copy, tiny_model
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

import dynaspec
from dynaspec.drafters.cross_tokenizer import (
    CommittedText,
    common_prefix,
    find_tail,
    special_prefix,
)
from dynaspec.errors import IncompatibleModelsError, UnsupportedOptionError
from dynaspec.models.tiny import byte_tokenizer

STORY = " Grüße aus Köln: naïve café, 日本語のテキスト 🙂!  Two  spaces,\ttabs\nand lines."
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Tokenizers split words differently: "
    "unbelievable, tokenization, don't, re-encode. Once upon a time there was a tokenizer." + STORY
) * 8
PROMPTS = (
    "Once upon a time.",
    "unbelievably tokenizable: don't re-encode!!",
    "  two leading spaces,\ttabs\tand\nnewlines\n",
    "naïve café — 日本語 🙂 ok",
)
SCHEDULES = ("adaptive", "constant", "dynamic")
MARKER = "<|im_start|>"
NEW_TOKENS = 40


# ---------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------


@cache
def bpe_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with merges trained on CORPUS; <pad> <s> </s> are ids 0 1 2, and a <s>
    goes before every text."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS], trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


@cache
def metaspace_tokenizer() -> PreTrainedTokenizerFast:
    """A SentencePiece-like BPE: spaces become "▁", one is put before the text and dropped
    again in decoding; characters outside CORPUS are <unk>."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False
    )
    tok.train_from_iterator([CORPUS], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )


@cache
def permuted_tokenizer() -> tuple[PreTrainedTokenizerFast, tuple[int, ...]]:
    """The byte tokenizer's tokens under permuted ids after two specials of its own (<pad>,
    <mask>), and for each of its ids the byte tokenizer's id (-1: a special of its own)."""
    base = byte_tokenizer().get_vocab()
    by_id = sorted(base, key=base.__getitem__)  # 256 bytes, then </s>
    order = torch.randperm(256, generator=torch.Generator().manual_seed(3)).tolist()
    vocab = {"<pad>": 0, "<mask>": 1}
    vocab.update({by_id[old]: 2 + new for new, old in enumerate(order)})
    vocab["</s>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="</s>", pad_token="<pad>", mask_token="<mask>"
    )
    to_base = (-1, -1, *order, base["</s>"])
    return fast, to_base


@cache
def bytes_tokenizer() -> PreTrainedTokenizerFast:
    """The tiny pair's byte tokenizer (256 bytes, then </s>)."""
    return byte_tokenizer()


@cache
def chat_tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level BPE with a chat marker added as a special token that, as Qwen's
    `<|im_start|>` under transformers 5, is not in `all_special_ids`."""
    tok = copy.deepcopy(bpe_tokenizer())
    tok.add_tokens([AddedToken(MARKER, special=True)])
    assert tok.convert_tokens_to_ids(MARKER) not in tok.all_special_ids
    return tok


TOKENIZERS = {
    "bytes": bytes_tokenizer,
    "bpe": bpe_tokenizer,
    "metaspace": metaspace_tokenizer,
    "chat": chat_tokenizer,
}


def tokenizer(name: str) -> PreTrainedTokenizerFast:
    return TOKENIZERS[name]()


def named(pairs: list[tuple[str, str]]) -> list[str]:
    """Test ids: target-draft."""
    return [f"{target}-{draft}" for target, draft in pairs]


def prompt_ids(tok: Any, text: str) -> torch.Tensor:
    return torch.tensor([tok(text).input_ids])


# ---------------------------------------------------------------------------------------
# Random tiny Llamas: the target's own greedy output
# ---------------------------------------------------------------------------------------


def printable_only(model: Any, tok: Any) -> Any:
    """`model` with the output rows of every token whose text is not printable ASCII (a
    special token, part of a character, any other character) set to zero: a zero logit
    never wins against the ~95 or more random ones left, so its text is plain ASCII."""
    texts = [tok.decode([i], skip_special_tokens=True) for i in range(len(tok))]
    keep = [i for i, text in enumerate(texts) if text and all(" " <= c <= "~" for c in text)]
    with torch.no_grad():
        rows = model.lm_head.weight
        mask = torch.ones(rows.shape[0], dtype=torch.bool)
        mask[torch.tensor(keep)] = False
        rows[mask] = 0.0
    return model


def noisy_cross_pair() -> tuple[Any, Any, PreTrainedTokenizerFast]:
    """A tiny byte-level target (printable output), a noisy copy of it under permuted ids
    (a draft of another tokenizer whose tokens are often, not always, accepted) and the
    draft's tokenizer."""
    permuted, to_base = permuted_tokenizer()
    target = printable_only(tiny_model("llama", vocab_size=257, hidden_size=32), bytes_tokenizer())
    return target, permuted_copy(noisy_copy(target, scale=0.2, seed=2), to_base), permuted


@cache
def llama(name: str, seed: int, printable: bool = False) -> Any:
    """A random tiny Llama over tokenizer `name`; `printable`: its text plain ASCII (else
    a byte-level one makes invalid UTF-8, which a draft can propose nothing after)."""
    model = tiny_model(
        "llama", vocab_size=len(tokenizer(name)), hidden_size=32, max_length=512, seed=seed
    )
    return printable_only(model, tokenizer(name)) if printable else model


@cache
def reference(target_name: str, text: str, printable: bool) -> torch.Tensor:
    ids = prompt_ids(tokenizer(target_name), text)
    return hf_greedy(llama(target_name, 0, printable), ids, NEW_TOKENS)


PAIRS = [("bytes", "bpe"), ("bpe", "bytes"), ("metaspace", "bytes"), ("bytes", "metaspace")]
# Printable text with every schedule; any bytes (invalid UTF-8 included) with one; drafted
# through text, and over the shared tokens (cross_tokenizer="intersection").
VARIANTS = [("string", True, schedule) for schedule in SCHEDULES] + [
    ("string", False, "constant"),
    ("intersection", True, "adaptive"),
    ("intersection", True, "dynamic"),
    ("intersection", False, "constant"),
]


@pytest.mark.parametrize(
    ("method", "printable", "schedule"),
    VARIANTS,
    ids=[f"{m}-{'ascii' if p else 'any'}-{s}" for m, p, s in VARIANTS],
)
@pytest.mark.parametrize(("target_name", "draft_name"), PAIRS, ids=named(PAIRS))
def test_greedy_output_is_the_targets_own(
    target_name: str, draft_name: str, method: str, printable: bool, schedule: str
) -> None:
    target, draft = llama(target_name, 0, printable), llama(draft_name, 1, printable)
    for text in PROMPTS:
        ids = prompt_ids(tokenizer(target_name), text)
        out = dynaspec.generate(
            target,
            draft,
            ids,
            tokenizer=tokenizer(target_name),
            assistant_tokenizer=tokenizer(draft_name),
            cross_tokenizer=method,
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            num_assistant_tokens=6,
            num_assistant_tokens_schedule=schedule,
        )
        assert out.sequences.tolist() == reference(target_name, text, printable).tolist(), text


def test_the_same_tokenizer_twice_drafts_token_ids_directly() -> None:
    target, draft = llama("bpe", 0), llama("bpe", 1)
    ids = prompt_ids(bpe_tokenizer(), PROMPTS[0])
    out = dynaspec.generate(
        target,
        draft,
        ids,
        tokenizer=bpe_tokenizer(),
        assistant_tokenizer=bpe_tokenizer(),
        max_new_tokens=NEW_TOKENS,
    )
    assert out.sequences.tolist() == hf_greedy(target, ids, NEW_TOKENS).tolist()


# ---------------------------------------------------------------------------------------
# Scripted models that tell a known story: high acceptance, the EOS
# ---------------------------------------------------------------------------------------


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, map(chr, chars), strict=True))


def byte_level_story(tok: Any, full: bytes) -> Any:
    """The greedy script of a perfect byte-level draft: after a prefix whose bytes begin
    `full`, the longest token of the bytes that follow (its EOS at the end)."""
    to_byte = {char: byte for byte, char in _bytes_to_unicode().items()}
    special = set(tok.all_special_ids)
    pieces = {
        i: bytes(to_byte[c] for c in token)
        for token, i in tok.get_vocab().items()
        if i not in special
    }
    by_bytes = {piece: i for i, piece in pieces.items()}
    longest = max(map(len, by_bytes))

    def next_token(prefix: tuple[int, ...]) -> int:
        done = b"".join(pieces.get(i, b"") for i in prefix)
        if not full.startswith(done):
            return by_bytes[b"#"]  # lost: propose anything
        rest = full[len(done) :]
        if not rest:
            return tok.eos_token_id
        size = next(n for n in range(min(longest, len(rest)), 0, -1) if rest[:n] in by_bytes)
        return by_bytes[rest[:size]]

    return next_token


def story_target(tok: Any, prompt: list[int], story: list[int]) -> ScriptedModel:
    """A target that says `story` after `prompt`, then its EOS for ever."""

    def next_token(prefix: tuple[int, ...]) -> int:
        index = len(prefix) - len(prompt)
        return story[index] if index < len(story) else tok.eos_token_id

    return ScriptedModel.greedy(next_token, len(tok))


STORY_PAIRS = [
    ("bytes", "bpe"),
    ("bpe", "bytes"),
    ("metaspace", "bytes"),
    ("metaspace", "bpe"),
]


def story_run(
    target_name: str,
    draft_name: str,
    story_text: str,
    room: int = 5,
    opening: str = PROMPTS[0],
    **kwargs: Any,
) -> tuple[Any, Any, int]:
    """The story told after `opening` by the target alone and with the draft that knows it
    (`room` more new tokens allowed than it takes), and the story's length in target
    tokens."""
    target_tok, draft_tok = tokenizer(target_name), tokenizer(draft_name)
    prompt = target_tok(opening).input_ids
    full = target_tok(opening + story_text).input_ids
    assert full[: len(prompt)] == prompt
    story = full[len(prompt) :]
    text = target_tok.decode(full, skip_special_tokens=True)
    target = story_target(target_tok, prompt, story)
    draft = ScriptedModel.greedy(byte_level_story(draft_tok, text.encode()), len(draft_tok))
    ids = torch.tensor([prompt])
    limits = {"max_new_tokens": len(story) + room, "eos_token_id": target_tok.eos_token_id}
    alone = dynaspec.generate(target, None, ids, **limits)
    out = dynaspec.generate(
        target,
        draft,
        ids,
        tokenizer=target_tok,
        assistant_tokenizer=draft_tok,
        **limits,
        **kwargs,
    )
    return alone, out, len(story)


@pytest.mark.parametrize("schedule", ["constant", "dynamic"])
@pytest.mark.parametrize(("target_name", "draft_name"), STORY_PAIRS, ids=named(STORY_PAIRS))
def test_a_draft_that_knows_the_story_is_accepted(
    target_name: str, draft_name: str, schedule: str
) -> None:
    alone, out, length = story_run(
        target_name,
        draft_name,
        STORY,
        num_assistant_tokens=8,
        num_assistant_tokens_schedule=schedule,
    )
    assert out.sequences.tolist() == alone.sequences.tolist()
    assert out.sequences[0, -1] == tokenizer(target_name).eos_token_id  # the story, the end
    rounds = out.stats.rounds
    accepted = sum(r.num_accepted for r in rounds)
    assert accepted >= 0.5 * (length + 1), [(r.num_drafted, r.num_accepted) for r in rounds]
    assert all(len(r.confidences) == r.num_drafted for r in rounds)


@pytest.mark.parametrize(("target_name", "draft_name"), STORY_PAIRS, ids=named(STORY_PAIRS))
def test_the_drafts_eos_after_complete_text_is_proposed_as_the_targets(
    target_name: str, draft_name: str
) -> None:
    alone, out, length = story_run(
        target_name,
        draft_name,
        " The end.",
        room=20,  # a draft of bytes needs ten tokens for it: room for them all
        num_assistant_tokens=20,
        num_assistant_tokens_schedule="constant",
    )
    assert out.sequences.tolist() == alone.sequences.tolist()
    (round_,) = out.stats.rounds  # one round: the whole story and the EOS, all accepted
    assert round_.stop_reason == "eos"
    assert round_.num_drafted == round_.num_accepted == length + 1


def test_a_chat_marker_outside_all_special_ids_is_skipped_as_special() -> None:
    """The committed tail re-encoded with the drafted text starts after the marker: the
    marker decodes to nothing and would not re-encode to itself, so a window over it (a
    chat prompt's end) once proposed nothing, and the rule gave the draft up."""
    alone, out, length = story_run(
        "chat",
        "bpe",
        " Once upon a time there was a tokenizer.",
        opening=PROMPTS[0] + MARKER,
        num_assistant_tokens=8,
        num_assistant_tokens_schedule="constant",
    )
    assert out.sequences.tolist() == alone.sequences.tolist()
    assert out.stats.rounds[0].num_drafted > 0  # the round right after the marker drafts
    assert sum(r.num_accepted for r in out.stats.rounds) >= 0.5 * length


# ---------------------------------------------------------------------------------------
# The same model under permuted ids: acceptance, and the draft's cache kept
# ---------------------------------------------------------------------------------------


def permuted_copy(target: Any, to_base: tuple[int, ...]) -> Any:
    """The target under the permuted tokenizer's ids: row i of the embedding and the output
    is the target's row to_base[i] (the draft's own specials: zero)."""
    draft = tiny_model("llama", vocab_size=len(to_base), hidden_size=32, max_length=512, seed=1)
    state = target.state_dict()
    index = torch.tensor([max(i, 0) for i in to_base])
    own = torch.tensor([i < 0 for i in to_base])
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        rows = state[name][index].clone()
        rows[own] = 0.0
        state[name] = rows
    draft.load_state_dict(state)
    return draft


def test_the_same_model_under_other_ids_is_accepted_and_keeps_its_cache() -> None:
    permuted, to_base = permuted_tokenizer()
    assert special_prefix(permuted) == [] and len(permuted) == 259
    target = tiny_model("llama", vocab_size=257, hidden_size=32, max_length=512)
    target = printable_only(target, bytes_tokenizer())
    draft = permuted_copy(target, to_base)
    ids = prompt_ids(bytes_tokenizer(), "Once upon a time")
    out = dynaspec.generate(
        target,
        draft,
        ids,
        tokenizer=bytes_tokenizer(),
        assistant_tokenizer=permuted,
        max_new_tokens=60,
        num_assistant_tokens=5,
        num_assistant_tokens_schedule="constant",
    )
    assert out.sequences.tolist() == hf_greedy(target, ids, 60).tolist()
    rounds = out.stats.rounds
    drafted = sum(r.num_drafted for r in rounds)
    accepted = sum(r.num_accepted for r in rounds)
    assert drafted and accepted >= 0.8 * drafted, (accepted, drafted)
    # After the prompt's round the draft is in step: its cache survives the re-encoding.
    assert max(r.catchup for r in rounds[1:]) <= 2, [r.catchup for r in rounds]


# ---------------------------------------------------------------------------------------
# With prompt lookup: copies first, the draft after them
# ---------------------------------------------------------------------------------------

REPEATS = "the cat sat. the cat sat. the dog ran. the cat"  # n-grams to copy from


@pytest.mark.parametrize("method", ["string", "intersection"])
@pytest.mark.parametrize("schedule", ["adaptive", "constant"])
@pytest.mark.parametrize(("target_name", "draft_name"), PAIRS, ids=named(PAIRS))
def test_greedy_output_with_prompt_lookup_is_the_targets_own(
    target_name: str, draft_name: str, method: str, schedule: str
) -> None:
    target, draft = llama(target_name, 0, True), llama(draft_name, 1, True)
    for text in (REPEATS, PROMPTS[1]):
        ids = prompt_ids(tokenizer(target_name), text)
        out = dynaspec.generate(
            target,
            draft,
            ids,
            tokenizer=tokenizer(target_name),
            assistant_tokenizer=tokenizer(draft_name),
            cross_tokenizer=method,
            prompt_lookup_num_tokens=4,
            max_new_tokens=NEW_TOKENS,
            num_assistant_tokens=6,
            num_assistant_tokens_schedule=schedule,
        )
        assert out.sequences.tolist() == hf_greedy(target, ids, NEW_TOKENS).tolist(), text


def alphabet_model(tok: Any) -> ScriptedModel:
    """Greedy: after a lowercase letter the next one (z, then a), after anything else "a";
    over `tok`'s own ids, so that two tokenizers' models write the same text."""
    chars = {i: tok.decode([i]) for i in range(len(tok))}
    ids = {char: i for i, char in reversed(chars.items()) if len(char) == 1}
    letters = "abcdefghijklmnopqrstuvwxyz"

    def next_token(prefix: tuple[int, ...]) -> int:
        last = chars.get(prefix[-1], "") if prefix else ""
        following = letters[(letters.index(last) + 1) % 26] if last and last in letters else "a"
        return ids[following]

    return ScriptedModel.greedy(next_token, len(tok))


@pytest.mark.parametrize("method", ["string", "intersection"])
def test_the_draft_carries_on_after_an_accepted_copy(method: str) -> None:
    permuted, _ = permuted_tokenizer()
    target, draft = alphabet_model(bytes_tokenizer()), alphabet_model(permuted)
    ids = prompt_ids(bytes_tokenizer(), "abcdefghijklmnopqrstuvwxyz. abc")
    out = dynaspec.generate(
        target,
        draft,
        ids,
        tokenizer=bytes_tokenizer(),
        assistant_tokenizer=permuted,
        cross_tokenizer=method,
        prompt_lookup_num_tokens=3,
        max_new_tokens=40,
        num_assistant_tokens=5,
        num_assistant_tokens_schedule="constant",
    )
    alone = dynaspec.generate(target, None, ids, max_new_tokens=40)
    assert out.sequences.tolist() == alone.sequences.tolist()
    both = [r for r in out.stats.rounds if r.num_copied and r.num_model]
    assert both, [(r.num_copied, r.num_model) for r in out.stats.rounds]
    # Copies, then the draft's tokens after them, accepted in the same round.
    assert all(r.num_accepted == r.num_drafted for r in both), [
        (r.num_copied, r.num_model, r.num_accepted) for r in both
    ]


# ---------------------------------------------------------------------------------------
# The text of the committed tokens
# ---------------------------------------------------------------------------------------


def test_a_character_split_across_tokens_waits_for_its_last_byte() -> None:
    tok = bytes_tokenizer()
    ids = tok("a世b").input_ids  # a, three bytes of 世, b
    text = CommittedText(tok)
    text.extend(ids[:3])
    assert (text.text, text.read) == ("a", 1)  # 世 is incomplete: held back
    text.extend(ids[:4])
    assert (text.text, text.read) == ("a世", 4)
    text.extend(ids)
    assert text.text == "a世b" and text.counts == [0, 1, 4, 5]
    text.rollback(3)
    assert (text.text, text.read) == ("a", 1)


def test_a_first_token_decoded_without_its_space_keeps_it_in_context() -> None:
    tok = metaspace_tokenizer()
    ids = tok("Once upon a time there was").input_ids
    text = CommittedText(tok)
    for end in range(1, len(ids) + 1):
        text.extend(ids[:end])
    assert text.text == "Once upon a time there was"


def test_a_long_prompt_is_decoded_at_once_up_to_its_tail() -> None:
    tok = bpe_tokenizer()
    ids = tok(CORPUS).input_ids
    text = CommittedText(tok)
    text.extend(ids)
    assert text.text == tok.decode(ids, skip_special_tokens=True)
    assert len(text.counts) <= 14  # one mark for the bulk, then one per tail token


def test_find_tail_skips_a_prefix_token_of_a_window() -> None:
    assert find_tail([5, 1, 2, 3], [1, 2]) == 1
    assert find_tail([1, 2, 3], []) == 0
    assert find_tail([9, 9, 9, 1, 2], [1, 2]) is None
    assert find_tail([1], [1, 2]) is None


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3, 4], [1, 2, 5]) == 2
    assert common_prefix([1, 2], [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix(list(range(100)), [*range(77), -1]) == 77


# ---------------------------------------------------------------------------------------
# Typed errors
# ---------------------------------------------------------------------------------------


def pair(**kwargs: Any) -> dict[str, Any]:
    """generate()'s arguments for the bytes target and the BPE draft."""
    return {
        "target": llama("bytes", 0),
        "draft": llama("bpe", 1),
        "input_ids": prompt_ids(bytes_tokenizer(), PROMPTS[0]),
        "max_new_tokens": 4,
        **kwargs,
    }


TOKENIZER_PAIR = {"tokenizer": bytes_tokenizer(), "assistant_tokenizer": bpe_tokenizer()}


def test_sampling_through_text_is_refused() -> None:
    with pytest.raises(UnsupportedOptionError, match="greedy only"):
        dynaspec.generate(**pair(do_sample=True, cross_tokenizer="string", **TOKENIZER_PAIR))


def test_another_vocabulary_without_the_tokenizers_names_both() -> None:
    with pytest.raises(IncompatibleModelsError, match="tokenizer=.*assistant_tokenizer="):
        dynaspec.generate(**pair())
    with pytest.raises(IncompatibleModelsError, match="without tokenizer="):
        dynaspec.generate(**pair(assistant_tokenizer=bpe_tokenizer()))


def test_a_tokenizer_larger_than_its_model_is_refused() -> None:
    swapped = {"tokenizer": bpe_tokenizer(), "assistant_tokenizer": bytes_tokenizer()}
    with pytest.raises(IncompatibleModelsError, match="tokenizer= has .* target model"):
        dynaspec.generate(**pair(**swapped))
    small_draft = llama("bytes", 1)  # 257 rows for a 4xx-token tokenizer
    with pytest.raises(IncompatibleModelsError, match="assistant_tokenizer= has .* draft model"):
        dynaspec.generate(**pair(draft=small_draft, **TOKENIZER_PAIR))


def test_a_batch_with_another_tokenizer_refuses_sampling_through_text() -> None:
    ids = torch.tensor([[10, 11, 12], [13, 14, 15]])  # batches: tests/test_batch_features.py
    with pytest.raises(UnsupportedOptionError, match="greedy only"):
        dynaspec.generate(
            **pair(input_ids=ids, do_sample=True, cross_tokenizer="string", **TOKENIZER_PAIR)
        )


# ---- the command line: --cross-tokenizer -------------------------------------------------------
@pytest.fixture(scope="module")
def cross_folders(tmp_path_factory):
    """A byte-tokenizer target and a BPE-tokenizer draft saved as model folders."""
    folder = tmp_path_factory.mktemp("cross")
    target_tok, draft_tok = byte_tokenizer(), bpe_tokenizer()
    target = tiny_model("llama", vocab_size=len(target_tok), eos_token_id=target_tok.eos_token_id)
    draft = tiny_model("llama", vocab_size=len(draft_tok), seed=3)
    for model, tok, name in ((target, target_tok, "target"), (draft, draft_tok, "draft")):
        model.save_pretrained(folder / name)
        tok.save_pretrained(folder / name)
    return str(folder / "target"), str(folder / "draft")


@pytest.mark.parametrize("lookup", [[], ["--prompt-lookup", "4"]], ids=["draft", "hybrid"])
def test_cli_drafts_with_another_tokenizer_and_keeps_the_output(cross_folders, capsys, lookup):
    from dynaspec import cli

    target, draft = cross_folders
    argv = ["generate", "--target", target, "--draft", draft, "--dtype", "float32",
            "--max-new-tokens", "12", "--compare", "--raw", *lookup]  # fmt: skip
    status = cli.main([*argv, "--cross-tokenizer", "The quick brown. The quick"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "drafts through text" in err and "outputs identical" in out
    assert ("prompt lookup" in out + err) == bool(lookup)


def test_cli_names_the_flag_when_the_tokenizers_differ(cross_folders, capsys):
    from dynaspec import cli

    target, draft = cross_folders
    argv = ["generate", "--target", target, "--draft", draft, "--dtype", "float32"]
    assert cli.main([*argv, "--max-new-tokens", "4", "The quick"]) != 0
    assert "--cross-tokenizer" in capsys.readouterr().err
    assert cli.main(["generate", "--pair", "tiny", "--cross-tokenizer", "x"]) == 2
    assert "name both models" in capsys.readouterr().err


def test_cli_samples_over_the_shared_tokens(cross_folders, capsys):
    from dynaspec import cli

    target, draft = cross_folders
    argv = ["generate", "--target", target, "--draft", draft, "--dtype", "float32",
            "--max-new-tokens", "8", "--raw", "--cross-tokenizer", "--sample",
            "--seed", "3"]  # fmt: skip
    assert cli.main([*argv, "The quick"]) == 0
    assert "over the tokens both share" in capsys.readouterr().err
    string = [*argv, "--cross-tokenizer-method", "string", "The quick"]
    assert cli.main(string) == 2
    assert "--cross-tokenizer-method intersection" in capsys.readouterr().err
    alone = ["generate", "--pair", "tiny", "--cross-tokenizer-method", "string", "x"]
    assert cli.main(alone) == 2
    assert "add it" in capsys.readouterr().err


def test_a_tokenizer_that_does_not_give_back_its_text_is_named() -> None:
    from tokenizers import normalizers

    lower = Tokenizer.from_str(bpe_tokenizer().backend_tokenizer.to_str())
    lower.normalizer = normalizers.Lowercase()
    lowering = PreTrainedTokenizerFast(tokenizer_object=lower, eos_token="</s>")
    with pytest.raises(IncompatibleModelsError, match="assistant_tokenizer= does not give back"):
        dynaspec.generate(**pair(tokenizer=bytes_tokenizer(), assistant_tokenizer=lowering))
