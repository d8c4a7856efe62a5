"""The tokens two tokenizers share: token-level intersection (TLI) of two vocabularies.

A token's *text* is what it adds to a text, read inside one: the decode of an anchor token
followed by it, less the decode of the anchor alone (so SentencePiece's "▁the" reads " the",
as byte-level BPE's "Ġthe" does, although neither decodes with its space alone). Tokens whose
text is empty, holds part of a character (U+FFFD), or that are special (BOS, chat markers)
have no text here. Two tokens are the same token when their texts are equal; where one
tokenizer has several tokens of one text, its lowest id stands for them. The draft's first
EOS stands for the target's first EOS.

The map is injective both ways, so the draft's distribution restricted to the shared tokens
is, token for token, a distribution over target tokens (see drafters/intersection.py).
Building it decodes every token of both tokenizers once (about 2.7 s for Qwen's 151,936);
the texts and the map are kept for the last few tokenizers and pairs, so a second call of
generate() with the same pair builds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch

from dynaspec.errors import IncompatibleModelsError

REPLACEMENT = "\ufffd"  # what decoding makes of part of a character
_KEPT = 4  # tokenizers (and tokenizer pairs) whose texts (and maps) are kept


@dataclass(frozen=True)
class SharedVocabulary:
    """Draft ids and target ids of the tokens both tokenizers have."""

    draft_ids: torch.Tensor  # (M,) long: draft ids with a target token of the same text
    target_ids: torch.Tensor  # (M,) long: that target token, for each
    to_draft: torch.Tensor  # (V_target,) long: the draft id of each target id, -1: none
    target_size: int  # V_target: the target's logit rows

    @property
    def size(self) -> int:
        return int(self.draft_ids.numel())

    def scores(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """(V_draft,) draft logits -> (V_target,) logits over target ids: each shared token's
        draft logit at its target id, the lowest finite value elsewhere (a probability of
        exactly 0 after softmax, while any shared token is finite)."""
        out = draft_logits.new_full((self.target_size,), torch.finfo(draft_logits.dtype).min)
        out[self.target_ids] = draft_logits[self.draft_ids]
        return out

    def to(self, device: torch.device | str | None) -> SharedVocabulary:
        if device is None or self.draft_ids.device == torch.device(device):
            return self
        return SharedVocabulary(
            self.draft_ids.to(device),
            self.target_ids.to(device),
            self.to_draft.to(device),
            self.target_size,
        )


def special_ids(tokenizer: Any) -> frozenset[int]:
    """The tokenizer's special tokens: its named ones (`all_special_ids`) and every added
    token marked special (transformers 5 leaves chat markers such as Qwen's `<|im_start|>`
    out of `all_special_ids`)."""
    special = set(getattr(tokenizer, "all_special_ids", ()))
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special |= {i for i, added in decoder.items() if getattr(added, "special", False)}
    return frozenset(special)


@lru_cache(maxsize=_KEPT)
def token_texts(tokenizer: Any) -> dict[str, int]:
    """Each ordinary token's text, as it reads inside a text -> its lowest id (kept for the
    last few tokenizers; callers must not change it)."""
    special = special_ids(tokenizer)
    anchor = list(tokenizer.encode("a", add_special_tokens=False))
    ids = [i for i in range(len(tokenizer)) if i not in special]
    base = _decode(tokenizer, [anchor])[0]
    decoded = _decode(tokenizer, [[*anchor, i] for i in ids])
    texts: dict[str, int] = {}
    for token, text in zip(ids, decoded, strict=True):
        piece = text[len(base) :] if text.startswith(base) else ""
        if piece and REPLACEMENT not in piece:
            texts.setdefault(piece, token)
    return texts


def _decode(tokenizer: Any, batch: list[list[int]]) -> list[str]:
    return list(
        tokenizer.batch_decode(batch, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    )


@lru_cache(maxsize=_KEPT)
def shared_vocabulary(
    target_tokenizer: Any,
    draft_tokenizer: Any,
    target_size: int,
    eos: tuple[tuple[int, ...], tuple[int, ...]] = ((), ()),
) -> SharedVocabulary:
    """The tokens both tokenizers have (`eos`: the target's and the draft's EOS ids, tuples;
    the draft's first stands for the target's first). IncompatibleModelsError when they
    share no token. Kept for the last few pairs (its tensors are never written)."""
    target_texts, draft_texts = token_texts(target_tokenizer), token_texts(draft_tokenizer)
    pairs = sorted(
        (draft_id, target_texts[text])
        for text, draft_id in draft_texts.items()
        if text in target_texts and target_texts[text] < target_size
    )
    target_eos, draft_eos = eos
    if target_eos and draft_eos and target_eos[0] < target_size:
        ends = (draft_eos[0], target_eos[0])
        pairs = [p for p in pairs if p[0] != ends[0] and p[1] != ends[1]] + [ends]
    if not pairs:
        raise IncompatibleModelsError(
            "the draft's tokenizer shares no token text with the target's, so the draft cannot "
            "propose target tokens directly: draft through text with "
            "cross_tokenizer='string' (greedy only), or pick another draft"
        )
    draft_ids = torch.tensor([d for d, _ in pairs], dtype=torch.long)
    target_ids = torch.tensor([t for _, t in pairs], dtype=torch.long)
    to_draft = torch.full((target_size,), -1, dtype=torch.long)
    to_draft[target_ids] = draft_ids
    return SharedVocabulary(draft_ids, target_ids, to_draft, target_size)
