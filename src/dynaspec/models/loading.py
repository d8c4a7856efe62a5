"""Loading models and target/draft pairs: presets, local folders, .gguf files, hub ids.

Presets come from PyPI packages (see dynaspec.models.presets) and go through the model cache
(dynaspec.models.cache): the first load joins, verifies and dequantizes, later loads read
safetensors in seconds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dynaspec.backends.kernels import registry as kernel_registry
from dynaspec.backends.llamacpp import LlamaCppAdapter
from dynaspec.backends.static import make_fast
from dynaspec.compat.validation import eos_ids
from dynaspec.errors import (
    ConfigError,
    CorruptModelFileError,
    IncompatibleModelsError,
    MissingDependencyError,
    ModelNotAvailableError,
    UnsupportedModelError,
    one_line,
)
from dynaspec.models import cache as model_cache
from dynaspec.models import memory
from dynaspec.models.compatibility import (  # noqa: F401 (check_pair_compatible: API)
    _check_logit_widths,
    _check_tokenizers,
    _logit_width,
    check_pair_compatible,
)
from dynaspec.models.devices import DeviceArg, check_cpu_only_options, resolve_device
from dynaspec.models.dtype import (  # noqa: F401 (DTYPE_CHOICES: --dtype of every command)
    AUTO,
    DEFAULT_DTYPE,
    DTYPE_CHOICES,
    DtypeChoice,
    choose_dtype,
    machine_dtype,
)
from dynaspec.models.llamacpp_draft import SAME, llamacpp_gguf
from dynaspec.models.presets import (
    DEFAULT_PAIR,
    ModelPreset,
    default_pair_name,
    find_model_preset,
    get_model_preset,
    get_pair_preset,
    model_presets,
)
from dynaspec.models.progress import fast_copy_label
from dynaspec.models.quiet import no_progress_bars
from dynaspec.models.report import models_report  # noqa: F401 (the CLI's `dynaspec models`)
from dynaspec.models.vocab import (
    check_gguf_pair,
    gguf_source,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from dynaspec.models.tiny import TinyPairConfig

DTypeArg = str | torch.dtype | None
CacheDirArg = str | os.PathLike[str] | None

# load_pair's default draft_quantize: quantize the draft as the target.
SAME_AS_TARGET = SAME  # draft_quantize: as the target's quantize


@dataclass(frozen=True, eq=False)
class ModelPair:
    """A target model and a draft model that share `tokenizer`, both in eval mode."""

    name: str  # pair preset name, e.g. "qwen2.5-coder"
    target: Any  # the large model whose output is reproduced (a fast adapter if asked)
    draft: Any  # the small model that proposes tokens (a fast adapter if asked)
    tokenizer: PreTrainedTokenizerBase  # shared by both (checked at load time)


def resolve_dtype(
    dtype: DTypeArg, *, auto_means: torch.dtype | str, device: DeviceArg = None
) -> torch.dtype | str:
    """A torch dtype from "machine" / "auto" / "bfloat16" / "float16" / "float32" / a dtype.

    None and "machine" give the machine's dtype for `device` (None: the CPU;
    dynaspec.models.dtype.machine_dtype: bf16 where the CPU multiplies bf16 natively, else
    float32; bf16 on a GPU). "auto" gives `auto_means`: the checkpoint's own dtype, float32
    for GGUF (its dequantized precision).
    """
    choice = choose_dtype(dtype, "cpu" if device is None else device)
    return auto_means if choice.dtype == AUTO else choice.dtype


def _gguf_dtype(dtype: DTypeArg, device: DeviceArg = None) -> torch.dtype:
    """The dtype a GGUF is dequantized to: "auto" means float32."""
    torch_dtype = resolve_dtype(dtype, auto_means=torch.float32, device=device)
    assert isinstance(torch_dtype, torch.dtype)
    return torch_dtype


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads: `threads`, or every core this process may use."""
    if threads is None:
        affinity = getattr(os, "sched_getaffinity", None)
        threads = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ConfigError(
            f"threads must be a positive integer or None (all cores), got {threads!r}"
        )
    torch.set_num_threads(threads)
    return threads


def _load_folder(
    folder: Path | str, dtype: torch.dtype | str, device: DeviceArg = None, *, fix: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a transformers folder or hub id, quietly; what transformers cannot read raises
    CorruptModelFileError ending in `fix`, a missing package MissingDependencyError."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoTokenizer,
    )

    try:
        with no_progress_bars():
            config = AutoConfig.from_pretrained(folder)
            # Encoder-decoder checkpoints (T5, BART, ...) load as seq2seq models.
            auto = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
            model = auto.from_pretrained(folder, dtype=dtype)
            tokenizer = AutoTokenizer.from_pretrained(folder)
    except ImportError as error:
        raise MissingDependencyError(
            f"loading {folder} needs a package that is not installed: {one_line(error)}"
        ) from error
    except Exception as error:  # transformers raises OSError, ValueError, TypeError, ...
        raise CorruptModelFileError(
            f"transformers could not load {folder} ({type(error).__name__}: "
            f"{one_line(error)}); {fix}"
        ) from error
    model.eval()
    target_device = resolve_device(device)
    if target_device is not None:
        model.to(target_device)
    return model, tokenizer


def _load_cached_folder(
    folder: Path, dtype: torch.dtype, device: DeviceArg = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a cache folder; a damaged one raises CorruptModelFileError saying to delete it."""
    return _load_folder(
        folder, dtype, device, fix="delete that folder and load again to rebuild it"
    )


def load_preset(
    preset: ModelPreset,
    *,
    dtype: DTypeArg = DEFAULT_DTYPE,
    threads: int | None = None,
    cache_dir: CacheDirArg = None,
    progress: bool = True,
    device: DeviceArg = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a preset through the model cache (built on first use). Returns (model, tokenizer)."""
    resolve_device(device)  # a bad device fails before a long first build
    set_threads(threads)
    torch_dtype = _gguf_dtype(dtype, device)
    folder = model_cache.ensure_preset_folder(preset, torch_dtype, cache_dir, progress=progress)
    return _load_cached_folder(folder, torch_dtype, device)


def load_model(
    name_or_path: str | os.PathLike[str],
    *,
    dtype: DTypeArg = DEFAULT_DTYPE,
    threads: int | None = None,
    cache_dir: CacheDirArg = None,
    device: DeviceArg = None,
    static: bool = False,
    compile: bool = False,
    quantize: str | None = None,
) -> tuple[Any, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer, in eval mode. Returns (model, tokenizer).

    With `static`, `compile` or `quantize` the model comes back as a fast model adapter
    (dynaspec.backends.static.StaticAdapter) that `generate` takes as the target or the
    draft: a static KV cache and bf16 weights prepacked for oneDNN (`static=True`), forwards
    compiled with torch.compile (`compile=True`), weight-only int8/int4 linear layers
    (`quantize="int8"`). It exposes `config`, `generation_config`, `device` and
    `compile_time_s`; the transformers model itself is released. Llama/Qwen2-style only.
    """
    model, tokenizer = _load_model(
        name_or_path, dtype=dtype, threads=threads, cache_dir=cache_dir, device=device
    )
    label = fast_copy_label(name_or_path)
    fast = make_fast(
        model, static=static, compile=compile, quantize=quantize, release=True, progress=label
    )
    return fast, tokenizer


def _load_model(
    name_or_path: str | os.PathLike[str],
    *,
    dtype: DTypeArg = DEFAULT_DTYPE,
    threads: int | None = None,
    cache_dir: CacheDirArg = None,
    device: DeviceArg = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The transformers model and its tokenizer (see load_model).

    name_or_path: a preset name ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b",
    "smollm2-135m", "gemma3-270m"; see `dynaspec models`), a transformers folder, a
    .gguf file (dequantized once into the cache), or a Hugging Face hub id.
    dtype: None or "machine" (default: for `device`, bf16 where the CPU multiplies bf16
    natively, else float32, and bf16 on a GPU; see dynaspec.models.dtype), "auto" (the
    checkpoint's own dtype; float32 for GGUF), "bfloat16", "float16", "float32", or a
    torch.dtype.
    threads: torch intra-op threads; None uses every core.
    cache_dir: model cache root; None uses $DYNASPEC_CACHE or the user cache folder.
    device: where the model runs ("cpu", "cuda", "cuda:1", a torch.device); None keeps it
    where transformers loads it (the CPU).
    """
    resolve_device(device)  # a bad device fails before a long load
    text = os.fspath(name_or_path)
    preset = find_model_preset(text) if isinstance(name_or_path, str) else None
    if preset is not None:
        return load_preset(preset, dtype=dtype, threads=threads, cache_dir=cache_dir, device=device)
    path = Path(text).expanduser()
    if path.is_file():
        set_threads(threads)
        torch_dtype = _gguf_dtype(dtype, device)
        folder = model_cache.ensure_file_folder(path, torch_dtype, cache_dir)
        return _load_cached_folder(folder, torch_dtype, device)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotAvailableError(
                f"{path} has no config.json, so it is not a transformers model folder: pass "
                "a folder written by save_pretrained(), or the path of a .gguf file"
            )
        set_threads(threads)
        fix = "check its config.json and weights (a folder written by save_pretrained() loads)"
        folder_dtype = resolve_dtype(dtype, auto_means="auto", device=device)
        return _load_folder(path, folder_dtype, device, fix=fix)
    if _looks_like_hub_id(text):
        set_threads(threads)
        return _load_from_hub(text, resolve_dtype(dtype, auto_means="auto", device=device), device)
    known = ", ".join(model_presets())
    raise ConfigError(
        f"{text!r} is not a preset, an existing file or folder, or a hub id (owner/name): "
        f"use one of the presets {known}, or check the path"
    )


def _looks_like_hub_id(text: str) -> bool:
    """`owner/name` with no path-like start and no .gguf suffix."""
    parts = text.split("/")
    return (
        len(parts) == 2
        and all(parts)
        and not text.startswith((".", "~"))
        and not text.endswith(".gguf")
    )


def _load_from_hub(
    model_id: str, dtype: torch.dtype | str, device: DeviceArg = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    try:
        fix = "check the id, or use a preset or a local folder"
        return _load_folder(model_id, dtype, device, fix=fix)
    except CorruptModelFileError as error:
        if not isinstance(error.__cause__, OSError):
            raise
        raise ModelNotAvailableError(
            f"could not load {model_id!r} from the Hugging Face hub "
            f"({one_line(error.__cause__)}); check the id "
            "and the network, or use a preset (`dynaspec models`) or a local folder"
        ) from error


def load_pair(
    name: str | None = None,
    *,
    dtype: DTypeArg = DEFAULT_DTYPE,
    threads: int | None = None,
    cache_dir: CacheDirArg = None,
    device: DeviceArg = None,
    draft_device: DeviceArg = None,
    static: bool = False,
    compile: bool = False,
    quantize: str | None = None,
    draft_quantize: str | None = SAME_AS_TARGET,
) -> ModelPair:
    """Load a target/draft pair preset (default "qwen2.5-coder") and check they agree.

    Both models are in eval mode, in `dtype` (default: the machine's for each model's
    device; see load_model), the target on `device` and the draft on `draft_device` (None:
    the target's `device`). Raises ModelNotAvailableError naming the pip command if a
    model's packages are not installed. `static`, `compile` and `quantize` make both models
    fast adapters (see load_model); `draft_quantize` sets the draft's quantization apart
    (default: as the target's), e.g. a bf16 target with an int8 draft.
    """
    draft_device = device if draft_device is None else draft_device
    resolve_device(device)
    resolve_device(draft_device)
    check_cpu_only_options(device, quantize=quantize)
    if draft_quantize != SAME_AS_TARGET:
        check_cpu_only_options(draft_device, draft_quantize=draft_quantize)
    pair = get_pair_preset(default_pair_name() if name is None else name)
    target_preset = get_model_preset(pair.target)
    draft_preset = get_model_preset(pair.draft)
    presets = ((target_preset, device), (draft_preset, draft_device))
    if all(resolve_device(d) in (None, torch.device("cpu")) for d in (device, draft_device)):
        fast = static or compile or quantize is not None
        check = (pair.name, _gguf_dtype(dtype), target_preset, draft_preset)
        _check_pair_memory(*check, fast, quantize)
    for preset, preset_device in presets:  # fail before a long load of the other
        folder = model_cache.preset_folder(preset, _gguf_dtype(dtype, preset_device), cache_dir)
        if not model_cache.is_complete_folder(folder):
            model_cache.locate_slices(preset)
    sources = [gguf_source(p, _gguf_dtype(dtype, d), cache_dir) for p, d in presets]
    check_gguf_pair(*sources, target_name=pair.target, draft_name=pair.draft)
    if draft_quantize == SAME_AS_TARGET:
        draft_quantize = quantize
    fast = {"static": static, "compile": compile, "release": True}
    target, target_tokenizer = load_preset(
        target_preset, dtype=dtype, threads=threads, cache_dir=cache_dir, device=device
    )
    target_rows = _logit_width(target)
    # The fast target first, then the draft: the adapter keeps only what it runs, so its
    # prepacked or quantized copies replace the transformers weights before the draft loads
    # (the peak holds the target twice, never the target twice and the draft).
    fast_target = make_fast(
        target, **fast, quantize=quantize, progress=fast_copy_label(pair.target)
    )
    del target
    draft, draft_tokenizer = load_preset(
        draft_preset, dtype=dtype, threads=threads, cache_dir=cache_dir, device=draft_device
    )
    _check_tokenizers(target_tokenizer, draft_tokenizer, (pair.target, pair.draft))
    _check_logit_widths(target_rows, _logit_width(draft))
    label = fast_copy_label(pair.draft)
    fast_draft = make_fast(draft, **fast, quantize=draft_quantize, draft=True, progress=label)
    return ModelPair(pair.name, fast_target, fast_draft, target_tokenizer)


def _check_pair_memory(
    name: str,
    dtype: torch.dtype,
    target: ModelPreset,
    draft: ModelPreset,
    fast: bool,
    quantize: str | None = None,
) -> None:
    """Refuses before anything is converted or loaded when the machine has too little memory
    (models/memory.py); a target quantized on its kernel counts its copy at the kernel's
    bytes a weight."""
    per_weight = None if quantize is None else kernel_registry.weight_bytes(quantize, dtype)
    need = memory.pair_need(
        name,
        dtype,
        (target.name, target.num_parameters),
        (draft.name, draft.num_parameters),
        fast=fast,
        copy_bytes_per_weight=per_weight,
    )
    fixes, cli_fixes = [], []
    if dtype == torch.float32:
        fixes.append('load in bfloat16 (dtype="bfloat16": half the memory)')
        cli_fixes.append("pass --dtype bfloat16 (half the memory)")
    memory.check_memory(need, fixes=fixes, cli_fixes=cli_fixes)


@dataclass(frozen=True)
class NamedModels:
    """A target and its draft loaded by name, with their tokenizers."""

    target: Any
    draft: Any  # None: decode with the target alone
    tokenizer: PreTrainedTokenizerBase  # the target's
    draft_tokenizer: PreTrainedTokenizerBase | None = None  # set only when it differs: the
    #                                  draft drafts through text (assistant_tokenizer=)


def load_models(
    pair: str | None = None, **options: Any
) -> tuple[Any, Any, PreTrainedTokenizerBase]:
    """(target, draft, tokenizer) of `load_model_set(pair, **options)`: what `dynaspec
    generate`, `bench` and `oracle` decode with."""
    loaded = load_model_set(pair, **options)
    return loaded.target, loaded.draft, loaded.tokenizer


def load_model_set(
    pair: str | None = None,
    *,
    target: str | os.PathLike[str] | None = None,
    draft: str | os.PathLike[str] | None = None,
    dtype: str | None = None,
    threads: int | None = None,
    tiny: TinyPairConfig | None = None,
    device: DeviceArg = None,
    static: bool = False,
    compile: bool = False,
    quantize: str | None = None,
    draft_quantize: str | None = SAME_AS_TARGET,
    with_draft: bool = True,
    other_tokenizer: bool = False,
    draft_engine: str = "torch",
) -> NamedModels:
    """The target, the draft and their tokenizers.

    target: a model (see load_model) decoded with `draft`, or alone when `draft` is None;
    `pair` is then ignored. Otherwise `pair` names a pair preset (default DEFAULT_PAIR), or
    "tiny": the built-in random pair (dynaspec.models.tiny, shaped by `tiny`).
    dtype: one of DTYPE_CHOICES; None gives DEFAULT_DTYPE (the machine's), or float32 for
    the tiny pair (see dtype_choice()).
    threads: torch intra-op threads; None uses every core, or one for the tiny pair (its
    models are all per-op overhead: one thread is fastest).
    device: where both models run, as in load_pair (CPU-only options: CpuOnlyOptionError).
    static, compile, quantize, draft_quantize: the fast path, as in load_pair.
    with_draft=False: the draft is neither loaded nor returned (None), e.g. for --no-draft.
    other_tokenizer: a named `draft` of another family keeps its own tokenizer
    (`draft_tokenizer`, for generate()'s assistant_tokenizer=) instead of being refused.
    draft_engine: "torch", or "llamacpp": the draft's GGUF (`draft` a .gguf file or a
    preset, else the pair's draft) run by llama.cpp (backends/llamacpp.py).
    """
    if draft_engine not in ("torch", "llamacpp"):
        raise ConfigError(f"unknown draft_engine {draft_engine!r}: choose 'torch' or 'llamacpp'")
    _check_device(device, quantize, (draft_quantize, draft_engine) if with_draft else None)
    if draft_engine == "llamacpp" and with_draft:
        gguf = llamacpp_gguf(pair, target, draft, draft_quantize, other_tokenizer)
        options = {"static": static, "compile": compile, "quantize": quantize, "device": device}
        alone = load_model_set(
            pair, target=target, dtype=dtype, threads=threads, with_draft=False, **options
        )
        return replace(alone, draft=LlamaCppAdapter(gguf, threads=threads))
    if draft_quantize == SAME_AS_TARGET:
        draft_quantize = quantize
    fast = {"static": static, "compile": compile, "quantize": quantize}
    draft_fast = {**fast, "quantize": draft_quantize, "draft": True}
    if target is None and (pair or DEFAULT_PAIR).strip().lower() == "tiny":
        set_threads(threads or 1)
        return _tiny_models(tiny, dtype, device, fast, draft_fast if with_draft else None)
    if target is None and not with_draft:
        target = get_pair_preset(default_pair_name() if pair is None else pair).target
    if target is None:
        loaded = load_pair(
            pair,
            dtype=dtype,
            threads=threads,
            device=device,
            **fast,
            draft_quantize=draft_quantize,
        )
        return NamedModels(loaded.target, loaded.draft, loaded.tokenizer)
    return _load_named_models(
        target,
        draft if with_draft else None,
        dtype=dtype,
        threads=threads,
        device=device,
        fast=fast,
        draft_fast=draft_fast,
        other_tokenizer=other_tokenizer,
    )


def _check_device(
    device: DeviceArg, quantize: str | None, draft: tuple[str | None, str] | None
) -> None:
    """Before anything loads: `device` is on this machine, and no CPU-only option (the
    integer quantizations, llama.cpp's draft) goes with a GPU. `draft`: the draft's
    (draft_quantize, draft_engine), None without a draft."""
    resolve_device(device)
    draft_quantize, engine = draft or (None, "torch")
    asked = None if draft_quantize == SAME_AS_TARGET else draft_quantize
    check_cpu_only_options(device, quantize=quantize, draft_quantize=asked, draft_engine=engine)


def _tiny_models(
    tiny: TinyPairConfig | None,
    dtype: str | None,
    device: DeviceArg,
    fast: dict[str, Any],
    draft_fast: dict[str, Any] | None,
) -> NamedModels:
    """The built-in random pair in `dtype` (None: float32) on `device`; no draft without
    `draft_fast`."""
    from dynaspec.models.tiny import tiny_pair

    target_model, draft_model, tokenizer = tiny_pair(tiny)
    if dtype is not None:
        torch_dtype = resolve_dtype(dtype, auto_means=torch.float32, device=device)
        target_model, draft_model = target_model.to(torch_dtype), draft_model.to(torch_dtype)
    if device is not None:
        target_model, draft_model = target_model.to(device), draft_model.to(device)
    fast_draft = None if draft_fast is None else make_fast(draft_model, **draft_fast, release=True)
    return NamedModels(make_fast(target_model, **fast, release=True), fast_draft, tokenizer)


def _load_named_models(
    target: str | os.PathLike[str],
    draft: str | os.PathLike[str] | None,
    *,
    dtype: str | None,
    threads: int | None,
    device: DeviceArg = None,
    fast: dict[str, Any],
    draft_fast: dict[str, Any],
    other_tokenizer: bool,
) -> NamedModels:
    """A target and a draft named by preset, folder, GGUF or hub id. Their tokenizers must
    agree, unless `other_tokenizer`: a draft of another family then keeps its own tokenizer
    (`draft_tokenizer`, for generate()'s assistant_tokenizer=: drafts through text)."""
    names = (os.fspath(target), os.fspath(draft or ""))
    if draft is not None and not other_tokenizer:  # two GGUFs: their headers, first
        sources = [gguf_source(name, _gguf_dtype(dtype, device)) for name in (target, draft)]
        check_gguf_pair(*sources, target_name=names[0], draft_name=names[1])
    target_model, tokenizer = load_model(
        target, dtype=dtype, threads=threads, device=device, **fast
    )
    if draft is None:
        return NamedModels(target_model, None, tokenizer)
    draft_model, draft_tokenizer = _load_model(draft, dtype=dtype, threads=threads, device=device)
    own: PreTrainedTokenizerBase | None = None
    try:
        # eos ids may differ (an instruct target, a base draft): the vocabularies may not
        _check_tokenizers(tokenizer, draft_tokenizer, names, same_eos=False)
    except IncompatibleModelsError as error:
        if not other_tokenizer:
            own_words = "or let the draft keep its own tokenizer"
            raise IncompatibleModelsError(
                f"{error}; {own_words}: other_tokenizer=True",
                cli_message=f"{error}; {own_words}: pass --cross-tokenizer",
            ) from error
        own = draft_tokenizer
    return NamedModels(target_model, _fast_draft(draft_model, draft_fast, names[1]), tokenizer, own)


def _fast_draft(model: PreTrainedModel, options: dict[str, Any], name: str) -> Any:
    """The draft on the fast path where it can run there; else (a draft of another family,
    e.g. Gemma 3's sliding-window layers) the transformers model, said on stderr: the
    target's fast path is what verification needs, and any draft keeps the output."""
    try:
        return make_fast(model, **options, release=True, progress=fast_copy_label(name))
    except UnsupportedModelError:
        model_cache.say(
            f"{name}: the draft runs on transformers' forward (the fast path does not run "
            f"{type(model).__name__}); the target keeps its fast path"
        )
        return model


def dtype_choice(
    dtype: str | None, *, pair: str | None = None, device: DeviceArg = None
) -> DtypeChoice:
    """The dtype load_models(pair, dtype=dtype, device=device) loads in, and why, without
    loading anything.

    For "auto" the dtype is that of a GGUF preset (float32); a folder's own may differ.
    """
    if dtype is None and (pair or "").strip().lower() == "tiny":
        return DtypeChoice(torch.float32, "the built-in tiny pair is float32")
    choice = choose_dtype(dtype, "cpu" if device is None else device)
    return DtypeChoice(torch.float32, choice.reason) if choice.dtype == AUTO else choice


def dtype_name(dtype: str | None, *, pair: str | None = None) -> str:
    """The dtype load_models(pair, dtype=dtype) gives, by name, without loading anything."""
    return dtype_choice(dtype, pair=pair).name


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """The ids that end generation: the model's generation config's, else the tokenizer's."""
    return eos_ids(None, model) or eos_ids(getattr(tokenizer, "eos_token_id", None), None)
