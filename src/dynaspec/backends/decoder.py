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

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dynaspec.backends.quant import quantize_linear
from dynaspec.errors import UnsupportedModelError

SUPPORTED_MODEL_TYPES = ("llama", "qwen2")


def check_supported(model: Any) -> None:
    """Raises UnsupportedModelError unless `StaticDecoder` can run `model`."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    layer_types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if model_type not in SUPPORTED_MODEL_TYPES or layer_types != {"full_attention"}:
        raise UnsupportedModelError(
            f"compile= and quantize= support {', '.join(SUPPORTED_MODEL_TYPES)} models with "
            f"full attention, not {model_type!r} ({type(model).__name__}): load it without "
            "compile= and quantize= (CLI: drop --compile/--quantize)"
        )


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of (1, heads, n, d) `x` with (n, d) tables (halves layout)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class StaticAttention(nn.Module):
    """Self-attention that writes into and reads from preallocated (1, kv_heads, L, d) caches."""

    def __init__(self, attention: nn.Module, config: Any, quantize: str | None) -> None:
        super().__init__()
        self.q_proj = quantize_linear(attention.q_proj, quantize)
        self.k_proj = quantize_linear(attention.k_proj, quantize)
        self.v_proj = quantize_linear(attention.v_proj, quantize)
        self.o_proj = quantize_linear(attention.o_proj, quantize)
        self.num_heads = int(config.num_attention_heads)
        self.num_kv_heads = int(getattr(config, "num_key_value_heads", None) or self.num_heads)
        self.head_dim = int(attention.head_dim)
        self.scaling = float(attention.scaling)

    def forward(
        self,
        x: torch.Tensor,  # (1, n, H)
        cos: torch.Tensor,  # (n, d)
        sin: torch.Tensor,  # (n, d)
        mask: torch.Tensor,  # (n, L) bool: may token i attend to cache slot j
        positions: torch.Tensor,  # (n,) cache slots of the fed tokens
        key_cache: torch.Tensor,  # (1, kv_heads, L, d), written in place
        value_cache: torch.Tensor,  # (1, kv_heads, L, d), written in place
    ) -> torch.Tensor:
        n = x.shape[1]
        query = self.q_proj(x).view(1, n, self.num_heads, self.head_dim).transpose(1, 2)
        key = self.k_proj(x).view(1, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        value = self.v_proj(x).view(1, n, self.num_kv_heads, self.head_dim).transpose(1, 2)
        query, key = rotate(query, cos, sin), rotate(key, cos, sin)
        key_cache.index_copy_(2, positions, key)
        value_cache.index_copy_(2, positions, value)
        out = F.scaled_dot_product_attention(
            query,
            key_cache,
            value_cache,
            attn_mask=mask,
            scale=self.scaling,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )  # (1, heads, n, d)
        return self.o_proj(out.transpose(1, 2).reshape(1, n, self.num_heads * self.head_dim))


class StaticBlock(nn.Module):
    """One pre-norm decoder layer: x + attention(norm(x)), then + mlp(norm(.))."""

    def __init__(self, layer: nn.Module, config: Any, quantize: str | None) -> None:
        super().__init__()
        self.input_layernorm = layer.input_layernorm
        self.self_attn = StaticAttention(layer.self_attn, config, quantize)
        self.post_attention_layernorm = layer.post_attention_layernorm
        self.gate_proj = quantize_linear(layer.mlp.gate_proj, quantize)
        self.up_proj = quantize_linear(layer.mlp.up_proj, quantize)
        self.down_proj = quantize_linear(layer.mlp.down_proj, quantize)
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
    ) -> torch.Tensor:
        attended = self.self_attn(
            self.input_layernorm(x), cos, sin, mask, positions, key_cache, value_cache
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

    def __init__(self, model: Any, quantize: str | None = None) -> None:
        super().__init__()
        check_supported(model)
        config = model.config
        base = model.model
        self.embed_tokens = base.embed_tokens
        self.blocks = nn.ModuleList(StaticBlock(layer, config, quantize) for layer in base.layers)
        self.norm = base.norm
        self.rotary_emb = base.rotary_emb
        self.lm_head = quantize_linear(model.lm_head, quantize)
        first = self.blocks[0].self_attn
        self.num_kv_heads = first.num_kv_heads
        self.head_dim = first.head_dim
        self.dtype = self.embed_tokens.weight.dtype
        self.device = self.embed_tokens.weight.device
        # How each block is run: `run_block`, or a compiled version of it (set by the owner).
        self.block_fn: Any = run_block

    def rope_tables(self, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each (length, d), for positions 0..length-1 (transformers' rotary)."""
        positions = torch.arange(length, device=self.device)[None]  # (1, length)
        probe = torch.empty(0, dtype=self.dtype, device=self.device)
        cos, sin = self.rotary_emb(probe, positions)
        return cos[0], sin[0]

    def new_cache(self, length: int) -> list[torch.Tensor]:
        """Key and value caches for `length` slots: 2 tensors (1, kv_heads, length, d) a layer."""
        shape = (1, self.num_kv_heads, length, self.head_dim)
        return [
            torch.zeros(shape, dtype=self.dtype, device=self.device)
            for _ in range(2 * len(self.blocks))
        ]

    def hidden(
        self,
        input_ids: torch.Tensor,  # (1, n)
        positions: torch.Tensor,  # (n,)
        mask: torch.Tensor,  # (n, L)
        cos: torch.Tensor,  # (L, d)
        sin: torch.Tensor,  # (L, d)
        cache: list[torch.Tensor],
    ) -> torch.Tensor:
        """Final-norm hidden states (n, H) of the fed tokens; writes their keys and values."""
        x = self.embed_tokens(input_ids)  # (1, n, H)
        cos, sin = cos[positions], sin[positions]  # (n, d)
        for index, block in enumerate(self.blocks):
            keys, values = cache[2 * index], cache[2 * index + 1]
            x = self.block_fn(block, x, cos, sin, mask, positions, keys, values)
        return self.norm(x)[0]
