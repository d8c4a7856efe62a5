"""Test helpers: tiny Hugging Face models built from a config, and scripted fake models.

Nothing here downloads anything. Two kinds of model:

* Tiny transformers models (`tiny_model`, `noisy_copy`), fp32, with a large
  `initializer_range` so the logits are peaky: top-2 ties in fp32 are then impossible in
  practice and greedy equality with `model.generate` must hold exactly.
  `hf_greedy` is the reference every equality test compares against.
* `ScriptedModel`, a fake `dynaspec.backends.hf.ModelAdapter` whose logits are a scripted
  function of the prefix (so of the position too). With it a test forces exactly how many
  drafted tokens are accepted, and can inspect the "cache" (the tokens it was fed).
  `CacheCheckStreamer` asserts the cache invariants after every round.

Typical use::

    target = ScriptedModel.greedy(lambda prefix: (prefix[-1] + 1) % 8, vocab_size=8)
    draft = ScriptedModel.greedy(lambda prefix: (prefix[-1] + 1) % 8, vocab_size=8)
    out = dynaspec.generate(target, draft, torch.tensor([[0]]), max_new_tokens=5)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import TYPE_CHECKING, Any

import pytest
import torch

if TYPE_CHECKING:  # transformers' model modules are imported on first use: they are slow
    from transformers import PretrainedConfig, PreTrainedModel

# Marks of a test that needs a CUDA GPU: `pytest -m cuda` selects those tests alone, and
# without a GPU they are skipped (never faked).
CUDA = (
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine"),
)
# The values of a test's `device` argument (conftest parametrizes every test that takes one).
DEVICES = ("cpu", pytest.param("cuda", marks=CUDA, id="cuda"))

# Architectures `tiny_model` can build: Llama-, Qwen2-, GPT-2- and GPT-NeoX-style.
ARCHITECTURES = ("llama", "qwen2", "gpt2", "gpt_neox")

# Prefix -> logits (V,) for the next token. len(prefix) is the position of that next token.
LogitsFn = Callable[[tuple[int, ...]], torch.Tensor]

# Prefix -> the next token of a greedy script.
NextTokenFn = Callable[[tuple[int, ...]], int]


# ---------------------------------------------------------------------------------------
# Tiny transformers models
# ---------------------------------------------------------------------------------------


def tiny_config(
    arch: str,
    *,
    vocab_size: int = 64,
    hidden_size: int = 32,
    num_layers: int = 1,
    num_heads: int = 4,
    max_length: int = 128,
    initializer_range: float = 0.5,
    eos_token_id: int | None = None,
) -> PretrainedConfig:
    """A config for a tiny model of architecture `arch` (one of ARCHITECTURES).

    bos/eos/pad ids default to None so that neither transformers nor dynaspec stops at an
    EOS the test did not ask for; pass `eos_token_id` to set one on the config.
    """
    import transformers

    special = {"bos_token_id": None, "eos_token_id": eos_token_id, "pad_token_id": None}
    if arch in ("llama", "qwen2"):  # same fields, different classes
        config_class = transformers.LlamaConfig if arch == "llama" else transformers.Qwen2Config
        return config_class(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=max(1, num_heads // 2),
            max_position_embeddings=max_length,
            initializer_range=initializer_range,
            **special,
        )
    if arch == "gpt2":
        return transformers.GPT2Config(
            vocab_size=vocab_size,
            n_embd=hidden_size,
            n_layer=num_layers,
            n_head=num_heads,
            n_positions=max_length,
            initializer_range=initializer_range,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **special,
        )
    if arch == "gpt_neox":
        return transformers.GPTNeoXConfig(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            max_position_embeddings=max_length,
            initializer_range=initializer_range,
            **special,
        )
    raise ValueError(f"unknown architecture {arch!r}; choose one of {ARCHITECTURES}")


# transformers class name of each architecture's causal LM.
_MODEL_CLASSES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "gpt_neox": "GPTNeoXForCausalLM",
}


def tiny_model(arch: str, *, seed: int = 0, **config_kwargs: Any) -> PreTrainedModel:
    """A randomly initialised fp32 model in eval mode; same (arch, seed, kwargs) -> same weights.

    `config_kwargs` go to `tiny_config` (vocab_size, hidden_size, num_layers, max_length,
    initializer_range, eos_token_id, ...).
    """
    import transformers

    config = tiny_config(arch, **config_kwargs)
    model_class = getattr(transformers, _MODEL_CLASSES[arch])
    torch.manual_seed(seed)
    model = model_class(config).float().eval()
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = None
    return model


def noisy_copy(model: PreTrainedModel, *, scale: float, seed: int = 0) -> PreTrainedModel:
    """A copy of `model` with N(0, (scale * std(w))^2) noise added to every weight tensor.

    Small scales give a draft that agrees with the target on most tokens but not all.
    """
    copy = deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in copy.parameters():
            spread = float(param.std()) if param.numel() > 1 else 1.0
            noise = torch.randn(param.shape, generator=generator) * scale * spread
            param.add_(noise)
    return copy


def bf16_llama_pair() -> tuple[PreTrainedModel, PreTrainedModel]:
    """A tiny llama target (hidden 128, 2 layers, 128 tokens) and a noisy copy as its draft,
    both in bf16: the pair the bf16 kernels' speculative-equality tests run."""
    target = tiny_model("llama", vocab_size=128, hidden_size=128, num_layers=2)
    draft = noisy_copy(target, scale=0.02, seed=1)
    return target.to(torch.bfloat16), draft.to(torch.bfloat16)


def hf_greedy(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    eos_token_id: int | list[int] | None = None,
    **kwargs: Any,
) -> Any:
    """The reference: transformers' own greedy `generate`, (1, T + new); `kwargs` are more
    generate() keywords (logits processors, stopping criteria, output flags).

    The attention mask is always passed: without it transformers masks every prompt token
    equal to the pad id, and the reference would be wrong.
    """
    return model.generate(
        input_ids,
        attention_mask=torch.ones_like(input_ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        pad_token_id=0,
        eos_token_id=eos_token_id,
        **kwargs,
    )


def assert_speculative_equals_alone(target, draft, prompts, **kwargs: Any) -> None:
    """dynaspec.generate with `draft` gives, prompt by prompt, what `target` alone gives (24
    new tokens); `kwargs` go to both calls."""
    import dynaspec

    for prompt in prompts:
        alone = dynaspec.generate(target, None, prompt, max_new_tokens=24, **kwargs)
        out = dynaspec.generate(target, draft, prompt, max_new_tokens=24, **kwargs)
        assert torch.equal(out.sequences, alone.sequences)


def random_prompts(
    count: int, vocab_size: int, *, min_len: int = 1, max_len: int = 8, seed: int = 0
) -> list[torch.Tensor]:
    """`count` random (1, T) prompts with min_len <= T <= max_len, reproducibly."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        length = int(torch.randint(min_len, max_len + 1, (1,), generator=generator))
        prompts.append(torch.randint(0, vocab_size, (1, length), generator=generator))
    return prompts


# ---------------------------------------------------------------------------------------
# Scripted fake models
# ---------------------------------------------------------------------------------------


def peaked_logits(token: int, vocab_size: int, confidence: float = 0.9) -> torch.Tensor:
    """(V,) logits whose softmax gives `token` probability `confidence`, the rest evenly."""
    rest = (1.0 - confidence) / (vocab_size - 1)
    logits = torch.full((vocab_size,), math.log(rest) if rest > 0 else -1e4)
    logits[token] = math.log(confidence)
    return logits


def probs_logits(probs: Sequence[float]) -> torch.Tensor:
    """(V,) logits whose softmax is `probs` (zeros become a very negative logit)."""
    values = torch.tensor(probs, dtype=torch.float64)
    return torch.where(values > 0, values.clamp_min(1e-300).log(), -1e4).float()


class ScriptedModel:
    """A fake `ModelAdapter`: the logits for a position are `logits_fn(prefix)`.

    The "cache" is the list of tokens fed so far (`self.cached`), so `num_cached`,
    `crop` and rollback behave exactly like a KV cache. Each `forward` is recorded in
    `self.calls` as the list of tokens it was fed.

    vocab_size: rows of the output distribution.
    max_length: context length reported to dynaspec's length check (None: unlimited).
    is_encoder_decoder: reported kind (begin() still returns the prompt as decoder input).
    device: where its logits (and the tokens begin() returns) live, like a model's device.
    """

    def __init__(
        self,
        logits_fn: LogitsFn,
        vocab_size: int,
        *,
        max_length: int | None = None,
        is_encoder_decoder: bool = False,
        device: torch.device | str = "cpu",
    ) -> None:
        self.logits_fn = logits_fn
        self.device = torch.device(device)
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.is_encoder_decoder = is_encoder_decoder
        self.cached: list[int] = []
        self.calls: list[list[int]] = []

    @classmethod
    def greedy(
        cls,
        next_token: NextTokenFn,
        vocab_size: int,
        *,
        confidence: float | Callable[[tuple[int, ...]], float] = 0.9,
        **kwargs: Any,
    ) -> ScriptedModel:
        """A model whose argmax after `prefix` is `next_token(prefix)`.

        `confidence` (a number, or a function of the prefix) is the softmax probability of
        that token, which the dynamic policy compares with its threshold.
        """

        def logits_fn(prefix: tuple[int, ...]) -> torch.Tensor:
            conf = confidence(prefix) if callable(confidence) else confidence
            return peaked_logits(next_token(prefix), vocab_size, conf)

        return cls(logits_fn, vocab_size, **kwargs)

    @property
    def num_cached(self) -> int:
        return len(self.cached)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        self.cached = []
        self.calls = []
        return input_ids[0].to(self.device)

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        fed = [int(t) for t in new_tokens.view(-1)]
        assert fed, "forward() was called with no tokens"
        assert 1 <= num_logits <= len(fed), (num_logits, fed)
        self.calls.append(fed)
        self.cached.extend(fed)
        end = len(self.cached)
        rows = [self.logits_fn(tuple(self.cached[: p + 1])) for p in range(end - num_logits, end)]
        return torch.stack(rows).to(self.device)  # (num_logits, V)

    def crop(self, num_tokens: int) -> None:
        assert num_tokens >= 0, num_tokens
        del self.cached[num_tokens:]


class CacheCheckStreamer:
    """A streamer that asserts the cache invariants after every round.

    dynaspec calls `put()` once with the prompt and then once per round, after both caches
    were rolled back; at that point the target must hold exactly len(tokens) - 1 tokens and
    the draft at most that. Every check is recorded in `self.rounds` as
    (num_tokens, target_cached, draft_cached) and `self.tokens` is the streamed sequence.
    """

    def __init__(self, target: Any, draft: Any = None) -> None:
        self.target = target
        self.draft = draft
        self.tokens: list[int] = []
        self.rounds: list[tuple[int, int, int | None]] = []
        self.ended = False

    def put(self, value: torch.Tensor) -> None:
        first = not self.tokens
        self.tokens.extend(int(t) for t in value.view(-1))
        if first:
            return
        length = len(self.tokens)
        draft_cached = self.draft.num_cached if self.draft is not None else None
        self.rounds.append((length, self.target.num_cached, draft_cached))
        assert self.target.num_cached == length - 1, (length, self.target.num_cached)
        if draft_cached is not None:
            assert draft_cached <= length - 1, (length, draft_cached)

    def end(self) -> None:
        self.ended = True


def shift_rule(step: int, vocab_size: int) -> NextTokenFn:
    """The greedy script `prefix -> (prefix[-1] + step) % vocab_size`."""
    return lambda prefix: (prefix[-1] + step) % vocab_size
