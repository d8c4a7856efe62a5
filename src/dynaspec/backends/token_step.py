"""A drafted token's forward in few calls: the one-token step of a w4a8 draft.

A one-token forward of a `StaticDecoder` runs seven w4a8 kernel calls and some forty small
torch calls a layer; for Qwen2.5-Coder 0.5B on the 2-core EPYC (AVX512-BF16) that is about
16 ms a drafted token (its logits included), of which the kernels take about 11. A model
that only drafts may round differently (the target checks its tokens, which never change
the output), so its one-token forwards run each layer in fewer calls, on the same weights:

- q, k and v in one kernel call, gate and up in another: each group's packed weights are
  joined into one tensor whose slices become the layers' own (`join`: no copy kept);
- the residual sums inside the o and down projections, as the kernel's float32 bias (for
  one token the residual is a vector), rounded to bf16 once instead of twice;
- queries and keys rotated together (one roll, one multiply-add); the norms in torch's
  fused `rms_norm`, in bf16.

Measured (draft-step-avx512-2026-12-06, benchmarks/HISTORY.md): 15.7 -> 11.3 ms a drafted token. Its
logits differ from the layer-by-layer forward's by rounding only (cosine 0.996-0.999 on the
real draft). `build` returns None where it does not apply: a layer not on the w4a8 kernel, no
bf16 attention kernel, an activation other than SiLU, a norm that is not an RMSNorm.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from dynaspec.backends.kernels.attention import KERNEL as ATTENTION
from dynaspec.backends.kernels.w4a8 import KERNEL as W4A8


@dataclass(frozen=True)
class LayerWeights:
    """One decoder layer as the step runs it: packed w4a8 weights (tiles of 64 rows) and
    float32 biases (None: none)."""

    norm: torch.Tensor  # (H,) the input norm's weight
    post_norm: torch.Tensor  # (H,) the post-attention norm's weight
    eps: float
    qkv: torch.Tensor  # q, k and v rows, joined
    qkv_bias: torch.Tensor | None  # (heads * d + 2 * kv_heads * d,)
    o: torch.Tensor
    o_bias: torch.Tensor | None  # (H,)
    gate_up: torch.Tensor  # gate rows, then up rows, joined
    gate_up_bias: torch.Tensor | None  # (2 I,)
    down: torch.Tensor
    down_bias: torch.Tensor | None  # (H,)


class TokenStep:
    """One token through a w4a8 decoder: final-norm hidden state (1, H); writes its key and
    value at `position` of every layer's cache (as `StaticDecoder.hidden` does)."""

    def __init__(self, decoder: nn.Module, layers: list[LayerWeights]) -> None:
        attention = decoder.blocks[0].self_attn
        self.embed, self.norm = decoder.embed_tokens, decoder.norm
        self.layers = layers
        self.heads, self.kv_heads = attention.num_heads, attention.num_kv_heads
        self.dim, self.scaling = attention.head_dim, attention.scaling

    @torch.inference_mode()
    def __call__(
        self,
        token: torch.Tensor,  # (1,)
        position: int,
        cos: torch.Tensor,  # (L, d) the rotary tables
        sin: torch.Tensor,  # (L, d)
        cache: list[torch.Tensor],  # per layer keys, values (1, kv_heads, L, d)
        mask: torch.Tensor,  # (1, 1, A) bool: the slots the token attends
    ) -> torch.Tensor:
        half, queries = self.dim // 2, self.heads + self.kv_heads
        # rotate(x) * sin = roll(x, half) * sin with its first half negated
        cos_row = cos[position].view(1, 1, self.dim)
        signed = sin[position].clone()
        signed[:half].neg_()
        x = self.embed(token.view(1))  # (1, H)
        for index, layer in enumerate(self.layers):
            keys, values = cache[2 * index], cache[2 * index + 1]
            qkv = _matmul(
                F.rms_norm(x, x.shape[-1:], layer.norm, layer.eps), layer.qkv, layer.qkv_bias
            )
            rotated = qkv[:, : queries * self.dim].view(1, queries, self.dim)
            rotated = torch.addcmul(rotated * cos_row, rotated.roll(half, -1), signed)
            keys[0, :, position] = rotated[0, self.heads :]
            values[0, :, position] = qkv[0, queries * self.dim :].view(self.kv_heads, self.dim)
            query = rotated[:, : self.heads].view(1, self.heads, 1, self.dim)
            attended = ATTENTION.attend(query, keys, values, mask, self.scaling)
            x = _matmul(attended.view(1, -1), layer.o, _residual(x, layer.o_bias))
            normed = F.rms_norm(x, x.shape[-1:], layer.post_norm, layer.eps)
            gate, up = _matmul(normed, layer.gate_up, layer.gate_up_bias).chunk(2, dim=-1)
            x = _matmul(F.silu(gate) * up, layer.down, _residual(x, layer.down_bias))
        return self.norm(x)


def build(decoder: nn.Module) -> TokenStep | None:
    """The step over `decoder`'s layers, joining their q/k/v and gate/up weights (the layers
    then hold slices of the joined tensors: the same bytes, no copy); None where it does
    not apply (the decoder is left as it is)."""
    blocks = list(decoder.blocks)
    first = blocks[0].self_attn
    if decoder.dtype != torch.bfloat16 or not ATTENTION.supports(
        torch.bfloat16, first.num_heads, first.num_kv_heads, first.head_dim
    ):
        return None
    if not all(_fits(block) for block in blocks):
        return None
    return TokenStep(decoder, [_layer(block) for block in blocks])


def _fits(block: nn.Module) -> bool:
    """Whether a `StaticBlock` is all w4a8 linears, RMSNorms and a SiLU MLP."""
    attention = block.self_attn
    linears = (attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj)
    linears += (block.gate_proj, block.up_proj, block.down_proj)
    on_kernel = all(getattr(layer, "kernel", None) is W4A8 for layer in linears)
    norms = (block.input_layernorm, block.post_attention_layernorm)
    rms = all(
        type(n).__name__.endswith("RMSNorm") and hasattr(n, "variance_epsilon") for n in norms
    )
    silu = isinstance(block.act_fn, nn.SiLU) or type(block.act_fn).__name__ == "SiLUActivation"
    return on_kernel and rms and silu


def _layer(block: nn.Module) -> LayerWeights:
    attention = block.self_attn
    qkv, qkv_bias = join((attention.q_proj, attention.k_proj, attention.v_proj))
    gate_up, gate_up_bias = join((block.gate_proj, block.up_proj))
    return LayerWeights(
        norm=block.input_layernorm.weight,
        post_norm=block.post_attention_layernorm.weight,
        eps=float(block.input_layernorm.variance_epsilon),
        qkv=qkv,
        qkv_bias=qkv_bias,
        o=attention.o_proj.weight,
        o_bias=attention.o_proj.bias,
        gate_up=gate_up,
        gate_up_bias=gate_up_bias,
        down=block.down_proj.weight,
        down_bias=block.down_proj.bias,
    )


def join(layers: tuple[nn.Module, ...]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The packed weights of w4a8 layers fed the same input, joined along their tiles, and
    their biases (None when none has one); each layer's weight becomes its slice."""
    joined = torch.cat([layer.weight for layer in layers])
    start = 0
    for layer in layers:
        tiles = layer.weight.shape[0]
        layer.weight = joined[start : start + tiles]  # a contiguous view
        start += tiles
    if all(layer.bias is None for layer in layers):
        return joined, None
    parts = [
        layer.bias if layer.bias is not None else torch.zeros(layer.out_features)
        for layer in layers
    ]
    return joined, torch.cat(parts)


def _matmul(rows: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(1, N) bf16: rows (1, K) bf16 @ w.T + bias (float32), on the w4a8 kernel."""
    return W4A8.packed_product(rows.contiguous(), packed, bias, torch.bfloat16)


def _residual(x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """(H,) float32: the residual `x` (1, H) as a projection's bias, its own bias added."""
    residual = x[0].float()
    return residual if bias is None else residual + bias
