"""Model shapes of real target/draft pairs, and random-weight models built from them.

No weights are downloaded: a model's cost depends on its shape (widths, depth, heads, key/value
heads, vocabulary, tied embeddings), not on the values of its weights, so random weights of
the real shape cost what the real model costs. The numbers are those of each model's
published config.json on the Hugging Face hub (Qwen/Qwen2.5-*, meta-llama/Llama-3.*,
facebook/opt-*). Rotary scaling and similar settings that change no cost are left out.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ModelShape:
    """The cost-relevant fields of one model's config.json."""

    name: str  # the hub model it copies, e.g. "Qwen2.5-7B"
    arch: str  # "qwen2" | "llama" | "opt": the transformers architecture
    hidden_size: int  # width of the residual stream
    num_layers: int  # decoder layers
    num_heads: int  # attention (query) heads
    num_kv_heads: int  # key/value heads (grouped-query attention); OPT: = num_heads
    intermediate_size: int  # MLP width (OPT: ffn_dim)
    vocab_size: int  # rows of the embedding and the output layer
    tie_word_embeddings: bool  # output layer shares the embedding matrix
    max_positions: int = 4096  # context the test needs, not the model's full length

    def config(self) -> Any:
        """A transformers config of this shape, with no BOS/EOS/PAD so nothing stops early."""
        import transformers

        special = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
        if self.arch in ("qwen2", "llama"):
            config_class = (
                transformers.Qwen2Config if self.arch == "qwen2" else transformers.LlamaConfig
            )
            return config_class(
                hidden_size=self.hidden_size,
                num_hidden_layers=self.num_layers,
                num_attention_heads=self.num_heads,
                num_key_value_heads=self.num_kv_heads,
                intermediate_size=self.intermediate_size,
                vocab_size=self.vocab_size,
                tie_word_embeddings=self.tie_word_embeddings,
                max_position_embeddings=self.max_positions,
                **special,
            )
        if self.arch == "opt":
            return transformers.OPTConfig(
                hidden_size=self.hidden_size,
                word_embed_proj_dim=self.hidden_size,
                num_hidden_layers=self.num_layers,
                num_attention_heads=self.num_heads,
                ffn_dim=self.intermediate_size,
                vocab_size=self.vocab_size,
                tie_word_embeddings=self.tie_word_embeddings,
                max_position_embeddings=min(self.max_positions, 2048),
                **special,
            )
        raise ValueError(f"unknown architecture {self.arch!r}: use qwen2, llama or opt")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PairShape:
    """A target and the draft it is paired with in practice."""

    name: str  # e.g. "qwen2.5-7b/0.5b"
    target: ModelShape
    draft: ModelShape

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target.to_json(), "draft": self.draft.to_json()}


QWEN25_05B = ModelShape("Qwen2.5-0.5B", "qwen2", 896, 24, 14, 2, 4864, 151936, True)
QWEN25_15B = ModelShape("Qwen2.5-1.5B", "qwen2", 1536, 28, 12, 2, 8960, 151936, True)
QWEN25_7B = ModelShape("Qwen2.5-7B", "qwen2", 3584, 28, 28, 4, 18944, 152064, False)
LLAMA32_1B = ModelShape("Llama-3.2-1B", "llama", 2048, 16, 32, 8, 8192, 128256, True)
LLAMA31_8B = ModelShape("Llama-3.1-8B", "llama", 4096, 32, 32, 8, 14336, 128256, False)
OPT_125M = ModelShape("OPT-125M", "opt", 768, 12, 12, 12, 3072, 50272, True)
OPT_67B = ModelShape("OPT-6.7B", "opt", 4096, 32, 32, 32, 16384, 50272, True)

# Smallest first, so that a run cut short by its time budget still has the cheap pairs.
GPU_PAIRS: tuple[PairShape, ...] = (
    PairShape("qwen2.5-1.5b/0.5b", QWEN25_15B, QWEN25_05B),
    PairShape("opt-6.7b/125m", OPT_67B, OPT_125M),
    PairShape("qwen2.5-7b/0.5b", QWEN25_7B, QWEN25_05B),
    PairShape("llama-3.1-8b/3.2-1b", LLAMA31_8B, LLAMA32_1B),
)


def tiny_shape(shape: ModelShape, scale: int) -> ModelShape:
    """The same architecture at a tiny size (for `--dry-run` on a CPU); `scale` 1 or 2."""
    heads = 2 * scale
    return ModelShape(
        name=f"tiny {shape.name}",
        arch=shape.arch,
        hidden_size=32 * scale,
        num_layers=scale,
        num_heads=heads,
        num_kv_heads=heads if shape.num_kv_heads == shape.num_heads else 1,
        intermediate_size=64 * scale,
        vocab_size=512,
        tie_word_embeddings=shape.tie_word_embeddings,
    )


DRY_RUN_PAIRS: tuple[PairShape, ...] = tuple(
    PairShape(f"tiny {pair.name}", tiny_shape(pair.target, 2), tiny_shape(pair.draft, 1))
    for pair in GPU_PAIRS
)


def build_model(shape: ModelShape, device: torch.device, dtype: torch.dtype, seed: int) -> Any:
    """A random-weight causal LM of `shape`, created directly on `device` in `dtype` (no CPU
    copy, no float32 pass), in eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(shape.config(), dtype=dtype)
    return model.eval()
