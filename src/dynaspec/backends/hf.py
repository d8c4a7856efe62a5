"""Model adapters: the only place the decoding loop touches a model.

The loop sees one small protocol (`ModelAdapter`): begin a sequence, feed new tokens and get
logits back, roll the cache back to n tokens. Invariant kept by the loop: a model's cache
holds the committed tokens minus the newest one (llama.cpp's "the last token is kept
separate, the cache holds the rest"); the draft may lag further behind and catches up by
being fed every token it has not seen.

Encoder-decoder models (T5, BART, ...): `begin()` runs the encoder once over the whole
prompt and returns the decoder start token; the loop then sees only decoder tokens, so
"tokens", "cache" and "roll back" all refer to the decoder. Each model encodes the prompt
with its own encoder (a draft's encoder output is its own). transformers keeps the decoder's
state in an `EncoderDecoderCache`: its self-attention part grows with the decoder tokens and
is cropped on rollback; its cross-attention part (keys/values of the encoder output) is
computed in the first decoder forward and kept as is for the whole sequence
(`EncoderDecoderCache.crop` crops only the self-attention part).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from dynaspec.backends.gemm_rows import fed_rows, padded
from dynaspec.backends.windows import recording_cache
from dynaspec.core.protocols import ModelAdapter
from dynaspec.errors import UnsupportedModelError


def _config_int(config: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int):
            return value
    return None


def decoder_start_token_id(model: Any) -> int:
    """The first decoder token of an encoder-decoder `model`: decoder_start_token_id, else
    bos_token_id, of its generation config (as transformers does); UnsupportedModelError
    when neither is a single token id."""
    source = getattr(model, "generation_config", None) or model.config
    candidates = (
        getattr(source, "decoder_start_token_id", None),
        getattr(source, "bos_token_id", None),
    )
    for start in candidates:
        if isinstance(start, (list, tuple)) and len(start) == 1:
            start = start[0]
        if isinstance(start, int):
            return start
        if start is not None:
            raise UnsupportedModelError(
                f"decoder_start_token_id {start!r} is not a single token id; dynaspec "
                "decodes one sequence: set model.generation_config.decoder_start_token_id "
                "to an int"
            )
    raise UnsupportedModelError(
        f"the encoder-decoder {type(model).__name__} has no decoder_start_token_id "
        "(nor bos_token_id); set model.generation_config.decoder_start_token_id"
    )


class HFAdapter:
    """Adapter for a transformers PreTrainedModel, decoder-only or encoder-decoder.

    Uses the model's own dynamic cache and crops it on rollback. Works with the `cache=`
    keyword of recent transformers 5.x releases and the older `past_key_values=`. Models
    without `logits_to_keep` (T5) compute logits for every fed token; the last ones are kept.
    Encoder-decoder: the cache is an `EncoderDecoderCache`, whose `crop` rolls back the
    decoder self-attention only; `max_length` is `max_position_embeddings` (BART: it bounds
    the encoder's and the decoder's positions alike), None for T5 (relative positions).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        config = model.config
        self.is_encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.vocab_size = _config_int(text_config, "vocab_size") or 0
        self.max_length = _config_int(
            text_config, "max_position_embeddings", "n_positions", "max_sequence_length"
        )
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._supports_logits_to_keep = "logits_to_keep" in params
        self.device = next(model.parameters()).device
        self.cache: Any = None
        self.num_cached = 0
        self._encoder_kwargs: dict[str, Any] = {}
        self._recording = False  # a sliding-window cache that keeps states until cropped

    def fork(self) -> HFAdapter:
        """A second adapter over the same model with its own cache (the model as its own
        draft: `generate(adapter, adapter, ...)`)."""
        return HFAdapter(self.model)

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        # The dynamic cache grows as needed; a sliding-window model's is made here, to record
        # what a rollback past its window needs (backends/windows.py).
        self.cache = None
        self.num_cached = 0
        self._encoder_kwargs = {}
        self._recording = False
        input_ids = input_ids.to(self.device)
        if not self.is_encoder_decoder:
            self.cache = recording_cache(self.model, max_length)
            self._recording = self.cache is not None
            return input_ids[0]
        start = decoder_start_token_id(self.model)
        # As transformers' generate() does for one unpadded sequence: every prompt token is
        # attended, the encoder runs once, and its output and mask go into every decoder
        # forward (the mask becomes the cross-attention mask).
        attention_mask = torch.ones_like(input_ids)  # (1, T)
        encoder_outputs = self.model.get_encoder()(
            input_ids=input_ids, attention_mask=attention_mask
        )
        self._encoder_kwargs = {
            "encoder_outputs": encoder_outputs,
            "attention_mask": attention_mask,
        }
        return torch.tensor([start], dtype=torch.long, device=self.device)

    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        # A long forward may be fed a few copies of its last token after the real ones
        # (backends/gemm_rows.py): they are dropped from the logits and the cache at once.
        pad = self._rows(new_tokens.numel()) - new_tokens.numel()
        kwargs: dict[str, Any] = {self._cache_kwarg: self.cache, "use_cache": True}
        if self._supports_logits_to_keep:
            kwargs["logits_to_keep"] = num_logits + pad
        ids_key = "decoder_input_ids" if self.is_encoder_decoder else "input_ids"
        ids = padded(new_tokens.to(self.device), new_tokens.numel() + pad)
        kwargs[ids_key] = ids.view(1, -1)  # (1, n + pad), on this model
        out = self.model(**kwargs, **self._encoder_kwargs)
        cache = getattr(out, "cache", None)
        self.cache = cache if cache is not None else out.past_key_values
        if self.num_cached == 0 and not hasattr(self.cache, "crop"):
            raise UnsupportedModelError(
                f"{type(self.model).__name__} returned a {type(self.cache).__name__} cache "
                "that cannot be rolled back (no crop()); speculative decoding needs a "
                "dynamic KV cache (transformers' DynamicCache or EncoderDecoderCache)"
            )
        self.num_cached += new_tokens.numel() + pad
        if pad:
            self.crop(self.num_cached - pad)
        real = out.logits[0, : out.logits.shape[1] - pad]  # the padding's rows dropped
        # (num_logits, V); the loop checks them for NaN/inf once per round, not per forward
        return real[-num_logits:]

    def _rows(self, num_tokens: int) -> int:
        """Rows to feed for `num_tokens` tokens: padded only where nothing but the causal
        mask keeps the padding unseen (a decoder-only model whose cache crops exactly) and
        the padding's positions fit the model's context (absolute position tables end)."""
        if self.is_encoder_decoder or self._recording:
            return num_tokens
        room = None if self.max_length is None else self.max_length - self.num_cached
        return fed_rows(num_tokens, getattr(self.model, "dtype", None), self.device, room)

    def crop(self, num_tokens: int) -> None:
        to_remove = self.num_cached - num_tokens
        if to_remove <= 0:
            if self._recording and self.num_cached:
                self.cache.crop(0)  # sliding-window layers back to their window
            return
        try:
            # A negative argument means "remove that many" in every transformers 5.x release.
            self.cache.crop(-to_remove)
        except (RuntimeError, ValueError) as err:
            raise UnsupportedModelError(
                f"could not roll back the {type(self.cache).__name__} of "
                f"{type(self.model).__name__} by {to_remove} tokens ({err}); models with "
                "sliding-window or recurrent caches past their window cannot be used yet"
            ) from err
        self.num_cached = num_tokens


def as_adapter(model: Any) -> ModelAdapter:
    """Wrap a transformers model; pass through anything that already is an adapter."""
    if isinstance(model, ModelAdapter):
        return model
    if hasattr(model, "config") and callable(model):
        return HFAdapter(model)
    raise UnsupportedModelError(
        f"cannot decode with a {type(model).__name__}: pass a transformers PreTrainedModel "
        "or an object implementing dynaspec.core.protocols.ModelAdapter"
    )
