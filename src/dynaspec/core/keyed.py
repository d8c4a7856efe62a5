"""Keyed sampling: the Gumbel-max trick with noise keyed by (seed, position, token id).

A token is sampled from the processed scores s (the distribution p = softmax(s) that the
sampler sees after every logits processor and warper) as

    token = argmax_x  s(x) + G(seed, position, x),   G = -log(-log u(seed, position, x))

with u uniform in (0, 1): a Gumbel-max draw from p (Gumbel 1954; the trick as in Maddison
et al. 2014, "A* Sampling"). The noise is a pure function of the seed, the token's absolute
position in its sequence (prompt tokens count, left padding does not) and the token id: a
counter-based hash, not a stream. So the target's token at a position depends on nothing but
the seed and the prefix, whatever was drafted, however many rounds it took, in which batch
row and on which device it ran.

Verification by coupling (Daliri et al. 2025, "Coupling without Communication and
Drafter-Invariant Speculative Decoding"): the draft samples its proposal with the same keyed
noise at the same position, and the target accepts a drafted token exactly when it equals
its own keyed sample there; the first mismatch is replaced by that sample. Every emitted
token is then the target's keyed sample given its prefix: the output equals the target
alone's with the same seed, token for token, for any draft source and lookahead, and it
follows the target's distribution exactly (Gumbel-max is exact). Agreement of two Gumbel-max
draws is at least (1 - TV) / (1 + TV) of the two distributions, against 1 - TV for rejection
sampling (core/verify.py).

The hash works on 32-bit words held in int64 tensors and never overflows int64 (a signed
overflow is undefined in C++, where torch's kernels are written): a product of two words is
assembled from 16-bit halves. Integer operations are exact on every device, so the uniforms
are bit-identical on a CPU and a GPU; the Gumbel transform runs in float64 (float32 where the
device has no float64, MPS) and is rounded to float32.
"""

from __future__ import annotations

import torch

# The constants of the "triple32" integer hash (C. Wellons, hash-prospector), a bijection of
# 32-bit words with low bias; and two odd constants that separate the hash's uses.
_SHIFTS = (17, 11, 15, 14)
_MULTIPLIERS = (0xED5AD4BB, 0xAC4C1B51, 0x31848BAB)
_SEED_SALT = 0x9E3779B9  # 2**32 / golden ratio
_LOW_SALT = 0x85EBCA6B


def _signed(word: int) -> int:
    """A 32-bit word as the int32 with the same bits."""
    word &= 0xFFFFFFFF
    return word - 2**32 if word >= 2**31 else word


def _shift_right(words: torch.Tensor, shift: int) -> torch.Tensor:
    """The logical right shift of int32 words (torch's >> on int32 is arithmetic)."""
    return (words >> shift) & ((1 << (32 - shift)) - 1)


def _as_words(values: torch.Tensor) -> torch.Tensor:
    """int32 words holding the low 32 bits of integers (int32 as they are; wider ones by
    int64 arithmetic, then narrowed)."""
    if values.dtype == torch.int32:
        return values
    return ((values.long() + 2**31) % 2**32 - 2**31).int()


def mix(words: torch.Tensor) -> torch.Tensor:
    """The triple32 hash of int32 words (their bits as 32-bit words): xor-shift, multiply,
    three times, then a last xor-shift. A bijection of the 2**32 words."""
    for shift, multiplier in zip(_SHIFTS, _MULTIPLIERS, strict=False):
        words = (words ^ _shift_right(words, shift)) * _signed(multiplier)
    return words ^ _shift_right(words, _SHIFTS[-1])


def reference_mix(word: int) -> int:
    """`mix` in Python's exact integers, for the tests: the words as unsigned 32-bit ints."""
    for shift, multiplier in zip(_SHIFTS, _MULTIPLIERS, strict=False):
        word = ((word ^ (word >> shift)) * multiplier) & 0xFFFFFFFF
    return word ^ (word >> _SHIFTS[-1])


def seed_key(seed: int) -> int:
    """A 32-bit word (as int32) from a seed in [-2**63, 2**64): both halves of its 64 bits,
    hashed."""
    bits = seed & 0xFFFFFFFFFFFFFFFF
    low = reference_mix((bits & 0xFFFFFFFF) ^ _SEED_SALT)
    return _signed(reference_mix(low ^ (bits >> 32)))


def uniforms(seed: int, positions: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Uniforms in (0, 1), one per (position, token id): positions (n, 1) against token_ids
    (m,) or (n, m) gives (n, m); positions and token_ids (N,) give (N,). Integers on one
    device. float64 with 52 bits from two hashes (float32
    with 23 bits where the device has no float64): (k + 0.5) / 2**bits is exact, never 0
    or 1."""
    key = mix(_as_words(positions) ^ seed_key(seed))  # a word per position
    first = mix(_as_words(token_ids) ^ key)  # (n, m): distinct for distinct ids, a bijection
    dtype = _float(positions.device)
    if dtype == torch.float32:
        return (_shift_right(first, 9).to(dtype) + 0.5) / float(2**23)
    second = mix(first ^ _signed(_LOW_SALT))  # (n, m): 20 more bits
    high = first.to(dtype) + float(2**31)  # the word, its top bit flipped: [0, 2**32)
    low = _shift_right(second, 12).to(dtype)  # [0, 2**20)
    return (high * float(2**20) + low + 0.5) / float(2**52)


SEED_MODES = ("keyed", "stream")  # what a seed means when sampling (docs/usage.md, "Seeds")


def gumbel(seed: int, positions: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """float32 Gumbel noise G(seed, position, token id), shaped as positions (n, 1) or (N,)
    broadcast against token_ids (m,), (n, m) or (N,)."""
    return (-torch.log(-torch.log(uniforms(seed, positions, token_ids)))).float()


def gumbel_noise(
    seed: int, positions: torch.Tensor, vocab_size: int, device: torch.device | str
) -> torch.Tensor:
    """(n, V) float32 Gumbel noise for every token id x < vocab_size at each of
    `positions` (n,)."""
    positions = torch.as_tensor(positions, dtype=torch.long, device=device).view(-1, 1)
    token_ids = torch.arange(vocab_size, dtype=torch.int32, device=device)  # (V,)
    return gumbel(seed, positions, token_ids)  # (n, V)


class NoiseRows:
    """The dense noise rows of one seed made so far, by device and position: a cache of a
    pure function. A sequence asks for a position again when the target checks what the
    draft proposed there, and when a round redrafts after a rejection; the rows before the
    first position asked for are never asked again (the committed length only grows) and
    are dropped."""

    def __init__(self, seed: int, most: int = 256) -> None:
        self.seed = seed
        self.most = most  # rows kept at most (a sampler reused for another sequence)
        self._rows: dict[tuple[torch.device, int], torch.Tensor] = {}  # (V,) float32 each

    def get(self, first: int, count: int, vocab_size: int, device: torch.device) -> torch.Tensor:
        """(count, V) rows for positions first .. first + count - 1 on `device`."""
        wanted = range(first, first + count)
        missing = [p for p in wanted if (device, p) not in self._rows]
        if missing:
            made = gumbel_noise(self.seed, torch.tensor(missing), vocab_size, device)  # (m, V)
            self._rows.update({(device, p): row for p, row in zip(missing, made, strict=True)})
        rows = torch.stack([self._rows[(device, p)] for p in wanted])  # (count, V)
        stale = [key for key in self._rows if key[1] < first or len(self._rows) > self.most]
        for key in stale:
            del self._rows[key]
        return rows


def keyed_tokens(
    scores: torch.Tensor, seed: int, first_position: int, cache: NoiseRows | None = None
) -> torch.Tensor:
    """(n,) tokens from (n, V) processed scores, row i the token at absolute position
    first_position + i: argmax(scores + G). A token whose score is -inf (masked by a
    processor) never wins while any token is allowed. On a CPU, where a warper (top-k,
    top-p, ...) masked most of the vocabulary, the noise is made for the allowed tokens
    only: the same values, since a token's noise depends on its id, not on its neighbours.
    Otherwise the rows come from `cache` (made once per position) when given."""
    scores = scores.float()
    count, vocab_size = scores.shape
    if scores.device.type == "cpu":
        rows, ids = (scores > float("-inf")).nonzero(as_tuple=True)  # (N,) each
        if 2 * rows.numel() < scores.numel():
            positions = torch.arange(first_position, first_position + count)  # (n,)
            keyed = torch.full_like(scores, float("-inf"))  # (n, V)
            keyed[rows, ids] = scores[rows, ids] + gumbel(seed, positions[rows], ids)
            return keyed.argmax(-1)
    if cache is not None and cache.seed == seed:
        noise = cache.get(first_position, count, vocab_size, scores.device)  # (n, V)
    else:
        positions = torch.arange(first_position, first_position + count)
        noise = gumbel_noise(seed, positions, vocab_size, scores.device)  # (n, V)
    return (scores + noise).argmax(-1)


def coupled_accept(
    draft_tokens: torch.Tensor, target_tokens: torch.Tensor
) -> tuple[int, torch.Tensor]:
    """Returns (num_accepted, next_token) by coupling: drafted tokens (k,) are accepted
    while they equal the target's keyed samples (k + 1,) at their positions; the next token
    is the target's keyed sample after them."""
    matches = (draft_tokens == target_tokens[:-1]).int()  # (k,)
    num_accepted = int(matches.cumprod(0).sum()) if matches.numel() else 0
    return num_accepted, target_tokens[num_accepted]


def _float(device: torch.device) -> torch.dtype:
    """float64 where the device computes it (MPS does not), else float32."""
    return torch.float32 if device.type == "mps" else torch.float64
