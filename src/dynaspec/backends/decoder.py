"""A decoder stack for a static KV cache, built from a transformers Llama- or Qwen2-style model.

The transformers model is never changed: this is a new module tree that refers to the
model's embedding, norms, rotary embedding and (unquantized) linear layers, or holds
quantized copies of the linear layers (dynaspec.backends.quant). Its forward writes the
keys and values of the fed tokens into caches the caller preallocated, at the positions the
caller gives, and attends over the whole cache with a mask (gpt-fast's recipe,
github.com/pytorch-labs/gpt-fast): rolling back is moving a position, and every forward over
n tokens has the same shapes, so that torch.compile compiles it once.

Supported: model types whose layers are pre-norm RMSNorm, rotary attention with grouped
key/value heads (optional q/k/v biases) and a SiLU-gated MLP, under transformers' names
(`model.layers[i].self_attn.q_proj`, ...): Llama and Qwen2, without sliding windows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from dynaspec.backends.kernels.attention import KERNEL as ATTENTION
from dynaspec.backends.pages import clean_file_mappings, trim_heap
from dynaspec.backends.quant import quantize_linear, release_replaced, row_invariant
from dynaspec.errors import UnsupportedModelError

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")

# Queries (rows x tokens) up to which attention over bf16 caches runs in kernels/attention.py:
# beyond, grouped_attention's batched matmuls are about as fast or faster (2-core
# AVX512-BF16 EPYC, 12 query heads over 2 key/value heads, d = 128, 256-512 slots: 1 query
# 29 vs 170 us, 8 queries 199 vs 227 us, 20 queries 955 vs 679 us; whole forwards of the
# 1.5B and 0.5B models over 4 tokens faster with it, over 8 tokens mixed).
KERNEL_QUERIES = 4


# Builds the layer that computes a model's nn.Linear (quantized, prepacked, or itself).
LinearMaker = Callable[[nn.Module], nn.Module]


def check_supported(
    model: Any, options: tuple[str, str] = ("static=, compile= and quantize=", "")
) -> None:
    """Raises UnsupportedModelError unless `StaticDecoder` can run `model`; `options` names
    what the caller passed, in Python's words and the CLI's (e.g. "static=True", "--static")."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if model_type in SUPPORTED_MODEL_TYPES and layer_types == {"full_attention"}:
        return
    python, cli = options
    window = getattr(config, "sliding_window", None)
    why = f", which attends over a sliding window of {window} tokens" if window else ""
    if model_type in SUPPORTED_MODEL_TYPES and not why:
        why = f", whose layers are {sorted(layer_types)}"
    template = (
        f"{{options}} run{'' if ' and ' in python else 's'} "
        f"{' and '.join(SUPPORTED_MODEL_TYPES)} models with full attention, not "
        f"{model_type!r} ({type(model).__name__}{why}): {{fix}}"
    )
    raise UnsupportedModelError(
        template.format(options=python, fix=f"load it without {python} (as a transformers model)"),
        cli_message=template.format(options=cli, fix=f"drop {cli}") if cli else None,
    )


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of (B, heads, n, d) `x` with (B, 1, n, d) tables (halves layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


# The prompt's prefill attends in blocks of this many query slots, aligned to slot 0, so that
# a query's attention is the same whether its prompt is prefilled whole or in chunks (the
# server's chunked prefill) whose sizes are multiples of it.
PREFILL_BLOCK = 64


@dataclass(frozen=True)
class Prefill:
    """A bit-exact forward of one sequence (bf16): its first `queries` fed tokens, fed from
    slot `start`, are the prompt's prefill (all of the prompt but its last token), so they
    attend the fastest way, by aligned blocks of PREFILL_BLOCK query slots (block [a, b)
    over the slots up to b rounded up to PREFILL_BLOCK: what any forward that feeds the
    block whole attends); every other query attends on kernels/attention.py, whose result
    depends on its own query, mask row and cache alone. So a token's attention is bitwise the
    same whether it is fed alone (a step of the target alone), among drafted tokens (a
    verification) or beside other rows of a batch, even in the first forward, which feeds
    the prompt with them, and whether the prompt was prefilled whole or in such chunks."""

    queries: int  # leading fed tokens that are the prompt's prefill (0: none)
    start: int = 0  # the slot of the first fed token

    def blocks(self) -> list[tuple[int, int, int]]:
        """(first, last, slots) per block: fed queries [first, last) attend `slots` slots."""
        out, first = [], 0
        while first < self.queries:
            block_end = (self.start + first) // PREFILL_BLOCK * PREFILL_BLOCK + PREFILL_BLOCK
            last = min(block_end - self.start, self.queries)
            slots = -(-(self.start + last) // PREFILL_BLOCK) * PREFILL_BLOCK
            out.append((first, last, slots))
            first = last
        return out


@dataclass(frozen=True)
class Packing:
    """Which cells of a ragged (B, W) block hold tokens, row-major: the linear layers run
    over those N tokens alone (a row's long draft no longer widens every row), attention
    over the block (where the cells without a token hold zeros)."""

    take: torch.Tensor  # (N,) indices into the flattened (B * W) block
    rows: int  # B
    width: int  # W
    # Per row: its tokens and the slots they attend; when given, each row attends over its
    # own slots with its own queries (`ragged_attention`) instead of the padded block's.
    sizes: tuple[int, ...] = ()
    attend: tuple[int, ...] = ()
    # Per row, with `sizes`: a bit-exact batch's rows, each attending as alone (Prefill)
    prefills: tuple[Prefill, ...] = ()

    def pack(self, block: torch.Tensor) -> torch.Tensor:
        """(B, W, F) -> (1, N, F): the cells with a token."""
        flat = block.reshape(self.rows * self.width, block.shape[-1])
        return flat.index_select(0, self.take)[None]

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """(1, N, F) -> (B, W, F), zeros in the cells without a token."""
        features = packed.shape[-1]
        flat = packed.new_zeros(self.rows * self.width, features)
        flat.index_copy_(0, self.take, packed.reshape(-1, features))
        return flat.view(self.rows, self.width, features)


class StaticAttention(nn.Module):
    """Self-attention that writes into and reads from preallocated (B, kv_heads, L, d) caches."""

    def __init__(self, attention: nn.Module, config: Any, linear: LinearMaker) -> None:
        super().__init__()
        self.q_proj = linear(attention.q_proj)
        self.k_proj = linear(attention.k_proj)
        self.v_proj = linear(attention.v_proj)
        self.o_proj = linear(attention.o_proj)
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(attention.head_dim)
        self.scaling = float(attention.scaling)

    def forward(
        self,
        x: torch.Tensor,  # (B, n, H)
        cos: torch.Tensor,  # (B, n, d)
        sin: torch.Tensor,  # (B, n, d)
        mask: torch.Tensor,  # (B, n, A) bool: may row b's token i attend to slot j (A <= L)
        positions: torch.Tensor,  # (B, n) cache slots of the fed tokens, per row
        key_cache: torch.Tensor,  # (B, kv_heads, L, d), written in place
        value_cache: torch.Tensor,  # (B, kv_heads, L, d), written in place
        packing: Packing | None = None,  # x is (1, N, H): the block's cells with a token
        prefill: Prefill | None = None,  # a bit-exact forward of one sequence
    ) -> torch.Tensor:
        query, key, value = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        if packing is not None:
            query, key, value = (packing.unpack(t) for t in (query, key, value))
        rows, n = query.shape[0], query.shape[1]
        query = query.view(rows, n, self.num_heads, self.head_dim).transpose(1, 2)
        key = key.view(rows, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        value = value.view(rows, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, n, d): the same for every head
        query, key = rotate(query, cos, sin), rotate(key, cos, sin)
        if rows == 1:  # one sequence: its slots along the cache's length
            key_cache.index_copy_(2, positions[0], key)
            value_cache.index_copy_(2, positions[0], value)
        else:  # each row its own slots
            slots = positions[:, None, :, None].expand(-1, self.num_kv_heads, -1, self.head_dim)
            key_cache.scatter_(2, slots, key)
            value_cache.scatter_(2, slots, value)
        if packing is not None and packing.sizes:
            ragged = ragged_attention(query, key_cache, value_cache, mask, packing, self.scaling)
            return self.o_proj(ragged)
        merged = attention(query, key_cache, value_cache, mask, self.scaling, prefill)  # (B, n, F)
        return self.o_proj(merged if packing is None else packing.pack(merged))


def attention(
    query: torch.Tensor,  # (B, heads, n, d)
    key_cache: torch.Tensor,  # (B, kv_heads, L, d)
    value_cache: torch.Tensor,  # (B, kv_heads, L, d)
    mask: torch.Tensor,  # (B, n, A) bool
    scaling: float,
    prefill: Prefill | None = None,
) -> torch.Tensor:
    """(B, n, heads * d): each token's attention, heads merged; by kernels/attention.py for a few
    queries over contiguous bf16 caches where it runs (not inside torch.compile: a C call
    would break the graph), else by grouped_attention. With `prefill` and where the kernel
    runs: its prefill's queries by blocks (one sequence), and every other query on the
    kernel, of every row (bit-exact: see Prefill)."""
    if prefill is None or not _kernel_runs(query, key_cache, value_cache):
        return _fastest(query, key_cache, value_cache, mask, scaling)
    done = prefill.queries
    parts = []
    for first, last, slots in prefill.blocks():
        early = mask[:, first:last, : min(slots, mask.shape[-1])]
        block = query[:, :, first:last]
        parts.append(_fastest(block, key_cache, value_cache, early, scaling))
    if done < query.shape[2]:
        late = query[:, :, done:]
        parts.append(ATTENTION.attend(late, key_cache, value_cache, mask[:, done:], scaling))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


def _kernel_runs(query: torch.Tensor, key_cache: torch.Tensor, value_cache: torch.Tensor) -> bool:
    """Whether kernels/attention.py can attend these queries over these caches here (a C
    call on the host: never over a GPU's caches, nor inside a compiled or captured graph)."""
    _, heads, _, dim = query.shape
    return (
        key_cache.device.type == "cpu"
        and not torch.compiler.is_compiling()
        and key_cache.is_contiguous()
        and value_cache.is_contiguous()
        and ATTENTION.supports(key_cache.dtype, heads, key_cache.shape[1], dim)
    )


def _fastest(
    query: torch.Tensor,  # (B, heads, n, d)
    key_cache: torch.Tensor,  # (B, kv_heads, L, d)
    value_cache: torch.Tensor,  # (B, kv_heads, L, d)
    mask: torch.Tensor,  # (B, n, A) bool
    scaling: float,
) -> torch.Tensor:
    """(B, n, heads * d) by the faster of the two for these queries: kernels/attention.py up to
    KERNEL_QUERIES (rows x tokens), grouped_attention beyond."""
    rows, heads, n, dim = query.shape
    if rows * n <= KERNEL_QUERIES and _kernel_runs(query, key_cache, value_cache):
        return ATTENTION.attend(query, key_cache, value_cache, mask, scaling)
    out = grouped_attention(query, key_cache, value_cache, mask, scaling)
    return out.transpose(1, 2).reshape(rows, n, heads * dim)


def grouped_attention(
    query: torch.Tensor,  # (B, heads, n, d)
    key_cache: torch.Tensor,  # (B, kv_heads, L, d)
    value_cache: torch.Tensor,  # (B, kv_heads, L, d)
    mask: torch.Tensor,  # (B, n, A) bool, A <= L: the first A slots may be attended
    scaling: float,
) -> torch.Tensor:
    """Softmax attention (in float32, as transformers' eager attention) of each query head
    over its key/value head, without copying the cache per query head; (B, heads, n, d).

    The queries of the heads that share a key/value head are stacked into one matrix: on a
    CPU this is several times faster than torch's scaled_dot_product_attention for one or a
    few queries (measured: 100 vs 404 us for 1 query over 256 slots, 14 heads, d = 64).
    """
    rows, heads, n, dim = query.shape
    kv_heads = key_cache.shape[1]
    groups = heads // kv_heads
    attend = mask.shape[-1]
    keys, values = key_cache[:, :, :attend], value_cache[:, :, :attend]
    stacked = query.reshape(rows, kv_heads, groups * n, dim)  # heads of a group, then tokens
    scores = (stacked @ keys.transpose(-1, -2)).float() * scaling  # (B, kv, g * n, A)
    hidden = ~mask[:, None, None]  # (B, 1, 1, n, A)
    scores = scores.view(rows, kv_heads, groups, n, attend).masked_fill(hidden, float("-inf"))
    weights = scores.softmax(dim=-1).to(query.dtype).view(rows, kv_heads, groups * n, attend)
    return (weights @ values).view(rows, heads, n, dim)


def ragged_attention(
    query: torch.Tensor,  # (B, heads, W, d)
    key_cache: torch.Tensor,  # (B, kv_heads, L, d)
    value_cache: torch.Tensor,  # (B, kv_heads, L, d)
    mask: torch.Tensor,  # (B, W, A) bool
    packing: Packing,
    scaling: float,
) -> torch.Tensor:
    """(1, N, heads * d) in the packed order: each row's own tokens over its own slots, so
    that one row's long catch-up (hundreds of tokens) does not make every row attend with
    as many queries over as many slots (measured in a batch of 8: a draft forward with one
    row catching up 392 tokens took 3.3 s against 0.4 s with no other row in the block)."""
    parts = []
    prefills = packing.prefills or (None,) * packing.rows
    for row, (size, attend) in enumerate(zip(packing.sizes, packing.attend, strict=True)):
        if not size:
            continue
        one = slice(row, row + 1)
        out = attention(
            query[one, :, :size],
            key_cache[one],
            value_cache[one],
            mask[one, :size, :attend],
            scaling,
            prefills[row],
        )  # (1, size, heads * d)
        parts.append(out[0])
    return torch.cat(parts)[None]


class StaticBlock(nn.Module):
    """One pre-norm decoder layer: x + attention(norm(x)), then + mlp(norm(.))."""

    def __init__(self, layer: nn.Module, config: Any, linear: LinearMaker) -> None:
        super().__init__()
        self.input_layernorm = layer.input_layernorm
        self.self_attn = StaticAttention(layer.self_attn, config, linear)
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.gate_proj = linear(layer.mlp.gate_proj)
        self.up_proj = linear(layer.mlp.up_proj)
        self.down_proj = linear(layer.mlp.down_proj)
        self.act_fn = layer.mlp.act_fn

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        packing: Packing | None = None,
        prefill: Prefill | None = None,
    ) -> torch.Tensor:
        normed = self.input_layernorm(x)
        attended = self.self_attn(
            normed, cos, sin, mask, positions, key_cache, value_cache, packing, prefill
        )
        x = x + attended
        normed = self.post_attention_layernorm(x)
        return x + self.down_proj(self.act_fn(self.gate_proj(normed)) * self.up_proj(normed))


def run_block(
    block: StaticBlock,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor,
    positions: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
) -> torch.Tensor:
    """One block's forward as a plain function, so one compiled graph serves every layer."""
    return block(x, cos, sin, mask, positions, key_cache, value_cache)


class StaticDecoder(nn.Module):
    """Embedding, decoder layers and final norm of a model; the head is applied separately."""

    def __init__(
        self,
        model: Any,
        quantize: str | None = None,
        *,
        dense_batches: bool = False,
        prepack: bool = False,
        release: bool = False,
        progress: str | None = None,
        int4_everywhere: bool = False,
    ) -> None:
        """quantize: None or one of quant.QUANTIZE_MODES (every linear layer, the head included);
        int4_everywhere: w4a8 puts even the layers finer than 4 bits in 4 bits (a draft);
        dense_batches: int8 keeps its codes dense for many-token forwards (2 bytes a weight);
        prepack: bf16 dense weights prepacked for oneDNN (a copy: the model's own weights
        are then no longer used); release: free each original weight as soon as its copy
        exists (the peak holds one layer twice, not the model; `model` cannot run after);
        progress: a label for a progress bar over the layers on stderr (None: no bar)."""
        super().__init__()
        check_supported(model)
        config = model.config
        base = model.model

        mappings = clean_file_mappings() if release else ()
        built: list[nn.Module] = []

        def linear(layer: nn.Module) -> nn.Module:
            made = quantize_linear(
                layer,
                quantize,
                dense_batches=dense_batches,
                prepack=prepack,
                int4_everywhere=int4_everywhere,
            )
            if release:
                release_replaced(layer, made, mappings)
                trim_heap()
            built.append(made)
            return made

        self.embed_tokens = base.embed_tokens
        layers = tqdm(
            base.layers, progress, unit="layer", file=sys.stderr, leave=False, disable=not progress
        )
        self.blocks = nn.ModuleList(StaticBlock(layer, config, linear) for layer in layers)
        self.norm = base.norm
        self.rotary_emb = base.rotary_emb
        self.lm_head = linear(model.lm_head)
        first = self.blocks[0].self_attn
        self.num_kv_heads = first.num_kv_heads
        self.head_dim = first.head_dim
        self.dtype = self.embed_tokens.weight.dtype
        self.device = self.embed_tokens.weight.device
        # Whether every linear layer (the head included) computes each row bitwise the same
        # whatever the row count, and so does attention past a prompt's prefill (bf16)
        self.row_invariant = all(row_invariant(layer) for layer in built) and (
            ATTENTION.supports(self.dtype, first.num_heads, self.num_kv_heads, self.head_dim)
        )

    def rope_tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each (length, d), for positions 0..length-1 (transformers' rotary)."""
        positions = torch.arange(length, device=self.device)[None]  # (1, length)
        probe = torch.empty(0, dtype=self.dtype, device=self.device)
        cos, sin = self.rotary_emb(probe, positions)
        return cos[0], sin[0]

    def new_cache(self, length: int, rows: int = 1) -> list[torch.Tensor]:
        """Key and value caches for `rows` sequences of `length` slots: 2 tensors
        (rows, kv_heads, length, d) a layer."""
        shape = (rows, self.num_kv_heads, length, self.head_dim)
        return [
            torch.zeros(shape, dtype=self.dtype, device=self.device)
            for _ in range(2 * len(self.blocks))
        ]

    def hidden(
        self,
        input_ids: torch.Tensor,  # (B, n)
        positions: torch.Tensor,  # (B, n)
        mask: torch.Tensor,  # (B, n, A)
        cos: torch.Tensor,  # (L, d)
        sin: torch.Tensor,  # (L, d)
        cache: list[torch.Tensor],
        block_fn: Callable[..., torch.Tensor] = run_block,
        packing: Packing | None = None,
        prefill: Prefill | None = None,
    ) -> torch.Tensor:
        """Final-norm hidden states (B, n, H) of the fed tokens, or (1, N, H) of the cells
        `packing` names; writes their keys and values.

        `block_fn` runs one block: `run_block`, or a compiled version of it (neither packed
        nor bit-exact); `prefill`: a bit-exact forward of one sequence (Prefill)."""
        x = self.embed_tokens(input_ids)  # (B, n, H)
        cos, sin = cos[positions], sin[positions]  # (B, n, d)
        if packing is not None:
            x = packing.pack(x)  # (1, N, H)
        for index, block in enumerate(self.blocks):
            keys, values = cache[2 * index], cache[2 * index + 1]
            if packing is None and prefill is None:
                x = block_fn(block, x, cos, sin, mask, positions, keys, values)
            else:
                x = block(x, cos, sin, mask, positions, keys, values, packing, prefill)
        return self.norm(x)
