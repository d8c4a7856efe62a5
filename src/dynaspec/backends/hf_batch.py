"""A transformers decoder-only model over a batch of left-padded rows, with ragged rounds.

Each row is a sequence of its own (its left padding, its prompt, its committed tokens) and
the rows share one transformers cache. A forward feeds every row its own number of tokens:
the block is right-aligned, a row with fewer tokens is padded on the left of the block, and
a 2-D attention mask hides those pads (holes) for the rest of the call; position ids count
each row's real tokens, so a row's positions are the ones it would have alone (transformers'
left-padding convention: the first real token has position 0).

Rolling back (`crop`) is per row. A row keeps the prefix of its sequence it asks for, but the
shared cache can only be cut at one index: it is cut where the earliest row's first unwanted
token sits, and any other row's tokens past that index are fed again in its next forward (a
catch-up; the loop feeds every row its committed tokens past `num_cached[row]`).

Rows may also join and leave between rounds (continuous batching, serve/): `join` prefills a
new row's prompt in a forward of its own and appends its cache as a new row, `leave` drops
rows. Holes only ever take room, so when they fill a quarter of the width the cache is
compacted: every row's own columns are moved together, right-aligned (`compact`).

In bf16 on a CPU a long forward is fed a multiple of 4 rows (backends/gemm_rows.py): a block
of B x W tokens is widened on the left by up to 3 columns that are holes in every row, and
a joining row's prefill is fed up to 3 copies of its last token, which its cache forgets at
once.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from dynaspec.backends import cache_rows
from dynaspec.backends.gemm_rows import fed_rows, fed_width, padded
from dynaspec.backends.windows import sliding_window
from dynaspec.errors import UnsupportedModelError


class HFBatchAdapter:
    """`core.protocols.BatchModelAdapter` for a transformers decoder-only model."""

    def __init__(self, model: Any) -> None:
        config = model.config
        if getattr(config, "is_encoder_decoder", False):
            raise UnsupportedModelError(
                f"{type(model).__name__} is an encoder-decoder model: batches of rows work "
                "with decoder-only models for now; call generate() once per prompt"
            )
        window = sliding_window(model)
        if window is not None:
            raise UnsupportedModelError(
                f"{type(model).__name__} attends through a sliding window of {window} tokens, "
                "which one shared cache cannot hold for rows of other lengths: batch it with "
                "backends.row_adapters.RowAdapters (batch_adapter does)"
            )
        self.model = model
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.vocab_size = int(getattr(text, "vocab_size", 0) or 0)
        self.packs_rows = False  # padded to a (B, widest) block: transformers' forward
        self.max_length = getattr(text, "max_position_embeddings", None)
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._supports_logits_to_keep = "logits_to_keep" in params
        self.device = next(model.parameters()).device
        self._dtype = getattr(model, "dtype", None)  # bf16 on a CPU: long forwards padded
        self.cache: Any = None
        self.mask = torch.zeros(0, 0, dtype=torch.long)  # (B, C): 0 at pads and holes
        self.slots: list[list[int]] = []  # per row: the cache index of each sequence token
        self.num_pads: list[int] = []  # per row: left padding at the start of its sequence

    @property
    def num_cached(self) -> list[int]:
        """Per row: how many tokens of its sequence (left padding included) are cached."""
        return [len(slots) for slots in self.slots]

    def bytes_per_token(self) -> int:
        """Cache bytes one cached token of one row takes (keys and values, every layer), by
        the model's config."""
        return cache_bytes_per_token(self.model)

    def begin(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Start the rows of a (B, T) left-padded prompt; nothing is fed yet."""
        rows = input_ids.shape[0]
        self.cache = None
        self.mask = torch.zeros(rows, 0, dtype=torch.long, device=self.device)
        self.slots = [[] for _ in range(rows)]
        self.num_pads = [int((row == 0).sum()) for row in attention_mask]

    def forward(
        self, new_tokens: Sequence[torch.Tensor], num_logits: Sequence[int]
    ) -> list[torch.Tensor]:
        """Appends new_tokens[row] (n_row,) to each row's sequence in one forward; returns
        per row its last num_logits[row] rows of logits (num_logits[row], V)."""
        width = max(tokens.numel() for tokens in new_tokens)
        if width == 0:
            return [torch.empty(0, self.vocab_size, device=self.device) for _ in new_tokens]
        # A long block may be widened on the left by columns that are holes in every row
        # (backends/gemm_rows.py); holes are masked as a shorter row's are.
        width = fed_width(len(new_tokens), width, self._dtype, self.device)
        ids, block, positions = self._block(new_tokens, width)
        mask = torch.cat([self.mask, block], dim=1)  # (B, C + W)
        keep = max(max(num_logits), 1)
        kwargs: dict[str, Any] = {self._cache_kwarg: self.cache, "use_cache": True}
        if self._supports_logits_to_keep:
            kwargs["logits_to_keep"] = keep
        if len(new_tokens) == 1 and bool(mask.all()):
            # one row without holes (a request alone in the server): transformers' own
            # causal path, as the single adapter (backends/hf.py) takes it
            out = self.model(input_ids=ids, **kwargs)
        else:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs)
        self.cache = _cache_of(out)
        if not hasattr(self.cache, "crop"):
            raise UnsupportedModelError(
                f"{type(self.model).__name__} returned a {type(self.cache).__name__} cache "
                "that cannot be rolled back (no crop()); speculative decoding needs a "
                "dynamic KV cache"
            )
        start = self.mask.shape[1]
        for row, tokens in enumerate(new_tokens):
            count = tokens.numel()
            self.slots[row].extend(range(start + width - count, start + width))
        self.mask = mask
        logits = out.logits[:, -keep:]  # (B, keep, V)
        return [logits[row, keep - n :] for row, n in enumerate(num_logits)]

    def _block(
        self, new_tokens: Sequence[torch.Tensor], width: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(B, W) ids right-aligned per row, their mask, and their position ids."""
        rows = len(new_tokens)
        ids = torch.zeros(rows, width, dtype=torch.long, device=self.device)
        block = torch.zeros(rows, width, dtype=torch.long, device=self.device)
        positions = torch.zeros(rows, width, dtype=torch.long, device=self.device)
        for row, tokens in enumerate(new_tokens):
            count = tokens.numel()
            if not count:
                continue
            first = len(self.slots[row])  # sequence index of the row's first new token
            index = torch.arange(first, first + count, device=self.device)
            ids[row, width - count :] = tokens.to(self.device)
            # Left padding of the sequence itself (the prompt's) stays masked.
            block[row, width - count :] = (index >= self.num_pads[row]).long()
            positions[row, width - count :] = (index - self.num_pads[row]).clamp(min=0)
        return ids, block, positions

    def prefill(self, tokens: torch.Tensor, own: Any = None) -> Any:
        """A joining row's cache with `tokens` (n,) appended to `own` (None: empty), by a
        forward of its own: the prompt of a row that joins, in one piece or in chunks."""
        count = tokens.numel()
        if not count:
            return own
        # A long prefill may be fed a few copies of its last token after the real ones
        # (backends/gemm_rows.py): the cache forgets them at once.
        done = 0 if own is None else own.get_seq_length()
        room = None if self.max_length is None else self.max_length - done
        rows = fed_rows(count, self._dtype, self.device, room)
        kwargs: dict[str, Any] = {"use_cache": True, self._cache_kwarg: own}
        if self._supports_logits_to_keep:
            kwargs["logits_to_keep"] = 1
        ids = padded(tokens.to(self.device), rows)[None]  # (1, rows)
        cache = _cache_of(self.model(input_ids=ids, **kwargs))
        if rows > count:
            cache.crop(count - rows)  # negative: remove that many (transformers 5)
        return cache

    def join(self, prompt: torch.Tensor, own: Any = None) -> None:
        """Adds a row whose sequence starts with `prompt` (n,), without left padding. Its
        first n - 1 tokens are cached by a forward of their own (or were already: `own`,
        from `prefill`); the last is fed with the row's first round, so that the round's
        verification gives its first new token."""
        head = prompt[:-1].to(self.device)
        count = head.numel()
        done = 0 if own is None else own.get_seq_length()
        own = self.prefill(head[done:], own)  # what `prefill` has not cached yet, if any
        rows, columns = len(self.slots), self.mask.shape[1]
        width = max(columns, count)
        if own is None:
            if self.cache is not None:
                cache_rows.add_zero_rows(self.cache, 0, 1)
        elif self.cache is None:
            cache_rows.add_zero_rows(own, rows, 0)
            self.cache = own
        else:
            cache_rows.append_row(self.cache, own, width)
        mask = torch.zeros(rows + 1, width, dtype=torch.long, device=self.device)
        mask[:rows, width - columns :] = self.mask
        mask[rows, width - count :] = 1
        shift = width - columns
        self.slots = [[slot + shift for slot in slots] for slots in self.slots]
        self.slots.append(list(range(width - count, width)))
        self.num_pads.append(0)
        self.mask = mask

    def leave(self, keep: Sequence[int]) -> None:
        """Keeps only the rows `keep`, in that order (the others have ended)."""
        if not keep:
            self.cache = None
            self.mask = self.mask.new_zeros(0, 0)
            self.slots, self.num_pads = [], []
            return
        index = torch.tensor(list(keep), dtype=torch.long, device=self.device)
        if self.cache is not None:
            cache_rows.select_rows(self.cache, index)
        self.mask = self.mask.index_select(0, index)
        self.slots = [self.slots[row] for row in keep]
        self.num_pads = [self.num_pads[row] for row in keep]
        self.compact(force=True)

    def compact(self, force: bool = False) -> None:
        """Moves every row's columns together, right-aligned, dropping the columns that
        are holes in every row: when asked to (`force`), or when that frees a quarter of
        the width (at least 16 columns)."""
        width = self.mask.shape[1]
        longest = max((len(slots) for slots in self.slots), default=0)
        spare = width - longest
        if spare == 0 or not (force or spare >= max(16, width // 4)):
            return
        index = torch.zeros(len(self.slots), longest, dtype=torch.long, device=self.device)
        used = torch.zeros_like(index)
        for row, slots in enumerate(self.slots):
            if slots:
                index[row, longest - len(slots) :] = torch.tensor(slots, device=self.device)
                used[row, longest - len(slots) :] = 1
        if self.cache is not None:
            cache_rows.gather_columns(self.cache, index)
        self.mask = self.mask.gather(1, index) * used
        self.slots = [list(range(longest - len(slots), longest)) for slots in self.slots]

    def crop(self, num_tokens: Sequence[int]) -> None:
        """Row r keeps at most its first num_tokens[r] sequence tokens cached (fewer when
        another row's rollback cut the shared cache earlier: it catches up next forward)."""
        length = self.mask.shape[1]
        cut = length
        for row, keep in enumerate(num_tokens):
            slots = self.slots[row]
            if keep < len(slots):
                cut = min(cut, slots[keep])
        if cut < length:
            self._cut(cut)
        self.compact()

    def _cut(self, cut: int) -> None:
        """Cuts the shared cache (and every row) at column `cut`."""
        length = self.mask.shape[1]
        try:
            self.cache.crop(cut - length)  # negative: remove that many (transformers 5)
        except (RuntimeError, ValueError) as err:
            raise UnsupportedModelError(
                f"could not roll back the {type(self.cache).__name__} of "
                f"{type(self.model).__name__} ({err}); models with sliding-window or "
                "recurrent caches cannot be used in a batch yet"
            ) from err
        self.mask = self.mask[:, :cut]
        self.slots = [[slot for slot in slots if slot < cut] for slots in self.slots]


def cache_bytes_per_token(model: Any) -> int:
    """Cache bytes one cached token of one sequence of a transformers `model` takes (keys
    and values, every layer), by its config."""
    config = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    element = next(model.parameters()).element_size()
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * element


def _cache_of(out: Any) -> Any:
    """The cache a forward returned (transformers 5 names it `cache` in some models)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
