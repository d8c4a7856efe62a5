"""Tiny built-in models: a random Llama target, a perturbed copy as its draft, and a
byte-level tokenizer. Nothing to download; used by `--pair tiny`, smoke runs and tests.

The outputs are gibberish (the weights are random) but every code path is real.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


@dataclass(frozen=True)
class TinyPairConfig:
    """Shape of the tiny pair."""

    hidden_size: int = 64  # width of both models
    num_layers: int = 2  # decoder layers of the target (the draft has the same)
    initializer_range: float = 0.4  # large: peaky logits, so fp32 ties cannot happen
    draft_noise: float = 0.01  # std of the noise added to the target's weights for the draft
    seed: int = 0  # seeds the weights


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer: 256 byte tokens plus </s> (id 256)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {char: i for i, char in enumerate(alphabet)}
    vocab["</s>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>")


def tiny_pair(config: TinyPairConfig | None = None) -> tuple[Any, Any, PreTrainedTokenizerFast]:
    """(target, draft, tokenizer): fp32 random Llama models over the byte vocabulary."""
    config = config or TinyPairConfig()
    tokenizer = byte_tokenizer()
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=2 * config.hidden_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=config.initializer_range,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.eos_token_id,
    )
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(config.seed)
    try:
        target = LlamaForCausalLM(model_config).eval()
        draft = copy.deepcopy(target)
        with torch.no_grad():
            for param in draft.parameters():
                param.add_(torch.randn_like(param) * config.draft_noise)
    finally:
        torch.random.set_rng_state(generator_state)
    return target, draft, tokenizer
