"""Which GGUF a model run by llama.cpp loads (`gguf_file`), and for a draft run by llama.cpp
(`load_model_set(..., draft_engine="llamacpp")`, the CLI's --draft-engine llamacpp) the
options it refuses."""

from __future__ import annotations

import os
from pathlib import Path

from dynaspec.errors import ConfigError
from dynaspec.models import cache as model_cache
from dynaspec.models.presets import default_pair_name, get_model_preset, get_pair_preset

SAME = "same"  # draft_quantize's default: the target's quantization

PathArg = str | os.PathLike[str] | None


def llamacpp_gguf(
    pair: str | None,
    target: PathArg,
    draft: PathArg,
    draft_quantize: str | None,
    other_tokenizer: bool,
) -> Path:
    """The GGUF a llama.cpp draft runs: `draft` itself (a .gguf file), a preset's (joined in
    the cache if sliced), or, with neither `draft` nor `target`, the pair's draft's.
    ConfigError for what such a draft does not take, in Python's words and the CLI's."""
    if other_tokenizer:
        raise ConfigError(
            "a draft run by llama.cpp drafts in the target's tokens: drop "
            "other_tokenizer=True, or draft_engine='llamacpp'",
            cli_message="--draft-engine llamacpp drafts in the target's tokens: drop "
            "--cross-tokenizer or --draft-engine llamacpp",
        )
    if draft_quantize not in (SAME, None):
        raise ConfigError(
            "a draft run by llama.cpp keeps its GGUF's own quantization: drop draft_quantize=",
            cli_message="--draft-engine llamacpp keeps the GGUF's own quantization: drop "
            "--draft-quantize",
        )
    if draft is None and target is None:
        draft = _pair_draft(pair)
    if draft is None:
        raise ConfigError(
            "a draft run by llama.cpp is a GGUF: name one (draft=FILE.gguf or a preset)",
            cli_message="--draft-engine llamacpp runs a GGUF: add --draft FILE.gguf or a preset",
        )
    return gguf_file(draft)


def gguf_file(name: str | os.PathLike[str]) -> Path:
    """The GGUF of `name`: a .gguf file itself, else the model preset's (joined in the cache
    if sliced; ConfigError for an unknown preset)."""
    if os.fspath(name).endswith(".gguf"):
        return Path(name)
    return model_cache.ensure_gguf(get_model_preset(os.fspath(name)))


def _pair_draft(pair: str | None) -> str:
    """The draft preset of the pair preset `pair` (None: the default pair)."""
    name = default_pair_name() if pair is None else pair
    if name.strip().lower() == "tiny":
        raise ConfigError(
            "the tiny pair has no GGUF for llama.cpp: use a preset pair, or name a draft "
            "GGUF (draft=...)",
            cli_message="the tiny pair has no GGUF for llama.cpp: drop --draft-engine "
            "llamacpp, or name a --draft GGUF",
        )
    return get_pair_preset(name).draft
