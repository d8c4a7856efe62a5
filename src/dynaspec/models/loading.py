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

from dynaspec.backends.llamacpp import LlamaCppAdapter
from dynaspec.backends.static import make_fast
from dynaspec.compat.validation import eos_ids
from dynaspec.errors import (
    ConfigError,
    IncompatibleModelsError,
    InsufficientMemoryError,
    ModelNotAvailableError,
    UnsupportedModelError,
)
from dynaspec.models import cache as model_cache
from dynaspec.models.compatibility import (  # noqa: F401 (check_pair_compatible: API)
    _check_logit_widths,
    _check_tokenizers,
    _logit_width,
    check_pair_compatible,
)
from dynaspec.models.devices import (
    DeviceArg,
    check_cpu_only_options,
    is_cpu,
    is_cuda,
    resolve_device,
    use_cuda_graphs,
)
from dynaspec.models.dtype import (  # noqa: F401 (DTYPE_CHOICES, dtype_choice, dtype_name: API)
    AUTO,
    DEFAULT_DTYPE,
    DTYPE_CHOICES,
    DtypeChoice,
    choose_dtype,
    dtype_choice,
    dtype_name,
    machine_dtype,
)
from dynaspec.models.fast_choice import FastChoice, check_fast, choose_fast
from dynaspec.models.folders import (
    _load_cached_folder,
    _load_folder,
    _load_from_hub,
    _looks_like_hub_id,
)
from dynaspec.models.llamacpp_draft import SAME, llamacpp_gguf
from dynaspec.models.memory import check_pair_memory as _check_pair_memory
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
    fast: FastChoice | None = None  # what fast="auto" chose; None: the models as asked


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
    cuda_graphs: bool | None = None,
) -> tuple[Any, PreTrainedTokenizerBase]:
    """Load a causal LM and its tokenizer, in eval mode. Returns (model, tokenizer).

    With `static`, `compile` or `quantize` the model comes back as a fast model adapter
    (dynaspec.backends.static.StaticAdapter) that `generate` takes as the target or the
    draft: a static KV cache and bf16 weights on the bit-exact kernel (`static=True`), forwards
    compiled with torch.compile (`compile=True`), weight-only int8/int4 linear layers
    (`quantize="int8"`). It exposes `config`, `generation_config`, `device` and
    `compile_time_s`; the transformers model itself is released. Llama/Qwen2-style only.
    `cuda_graphs`: CUDA graphs on the static path, as in load_pair.
    """
    graphs = use_cuda_graphs(device, cuda_graphs, static=static, compile=compile)
    model, tokenizer = _load_model(
        name_or_path, dtype=dtype, threads=threads, cache_dir=cache_dir, device=device
    )
    label = fast_copy_label(name_or_path)
    options = {"static": static, "compile": compile, "quantize": quantize, "graphs": graphs}
    fast = make_fast(model, **options, release=True, progress=label)
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
    fast: str | None = None,
    cuda_graphs: bool | None = None,
) -> ModelPair:
    """Load a target/draft pair preset (default "qwen2.5-coder") and check they agree.

    Both models are in eval mode, in `dtype` (default: the machine's for each model's
    device; see load_model), the target on `device` and the draft on `draft_device` (None:
    the target's `device`). Raises ModelNotAvailableError naming the pip command if a
    model's packages are not installed. `static`, `compile` and `quantize` make both models
    fast adapters (see load_model); `draft_quantize` sets the draft's quantization apart
    (default: as the target's), e.g. a bf16 target with an int8 draft.

    fast="auto" chooses instead the fastest setting that keeps the target's exact output
    on this machine (dynaspec.models.fast_choice: the static path, the draft's
    quantization; off the static path when the memory for its copy is missing), and
    records it in the pair's `fast`; pass `**pair.fast.generate_options()` to generate()
    for the prompt lookup it chose. It refuses static=, compile=, quantize= and
    draft_quantize= beside it. fast=None (default): the models as asked, transformers'
    forward when nothing is asked.
    `cuda_graphs`: CUDA graphs on the static path of a model on a GPU (backends/graphs.py):
    None (default) wherever it runs there; True: the static path with them; False: none.
    """
    draft_device = device if draft_device is None else draft_device
    asked = {"static": static, "compile": compile, "quantize": quantize, "cuda_graphs": cuda_graphs}
    _check_pair_options(fast, (device, draft_device), asked, draft_quantize)
    static = static or bool(cuda_graphs)  # cuda_graphs=True: the static path, with graphs
    pair = get_pair_preset(default_pair_name() if name is None else name)
    target_preset = get_model_preset(pair.target)
    draft_preset = get_model_preset(pair.draft)
    presets = ((target_preset, device), (draft_preset, draft_device))
    choice = None if fast is None else choose_fast(device, dtype)
    if choice is not None and not is_cpu(draft_device):
        choice = replace(choice, draft_quantize=None)  # the 4-bit kernel is a CPU kernel
    if all(is_cpu(d) for d in (device, draft_device)):
        memory = (pair.name, _gguf_dtype(dtype), target_preset, draft_preset)
        choice = _fitting_choice(choice, memory)
        fast_path = static or compile or quantize is not None or bool(choice and choice.static)
        _check_pair_memory(*memory, fast_path, quantize)
    if choice is not None:
        static, draft_quantize = choice.static, choice.draft_quantize
    for preset, preset_device in presets:  # fail before a long load of the other
        folder = model_cache.preset_folder(preset, _gguf_dtype(dtype, preset_device), cache_dir)
        if not model_cache.is_complete_folder(folder):
            model_cache.locate_slices(preset)
    sources = [gguf_source(p, _gguf_dtype(dtype, d), cache_dir) for p, d in presets]
    check_gguf_pair(*sources, target_name=pair.target, draft_name=pair.draft)
    if draft_quantize == SAME_AS_TARGET:
        draft_quantize = quantize
    asked["static"] = static  # as chosen (fast="auto", cuda_graphs=True)
    fast_of = _fast_of(asked, (device, draft_device), (quantize, draft_quantize))
    target, target_tokenizer = load_preset(
        target_preset, dtype=dtype, threads=threads, cache_dir=cache_dir, device=device
    )
    target_rows = _logit_width(target)
    # The fast target first, then the draft: the adapter keeps only what it runs, so its
    # prepacked or quantized copies replace the transformers weights before the draft loads
    # (the peak holds the target twice, never the target twice and the draft).
    label = fast_copy_label(pair.target)
    fast_target = make_fast(target, **fast_of[0], release=True, progress=label)
    del target
    draft, draft_tokenizer = load_preset(
        draft_preset, dtype=dtype, threads=threads, cache_dir=cache_dir, device=draft_device
    )
    _check_tokenizers(target_tokenizer, draft_tokenizer, (pair.target, pair.draft))
    _check_logit_widths(target_rows, _logit_width(draft))
    label = fast_copy_label(pair.draft)
    fast_draft = make_fast(draft, **fast_of[1], draft=True, release=True, progress=label)
    return ModelPair(pair.name, fast_target, fast_draft, target_tokenizer, choice)


def _check_pair_options(
    fast: str | None,
    devices: tuple[DeviceArg, DeviceArg],
    asked: dict[str, Any],
    draft_quantize: str | None,
) -> None:
    """Before anything loads: the devices are on this machine, `fast` goes with the options
    `asked` (static, compile, quantize, cuda_graphs), and no option runs where it cannot."""
    device, draft_device = devices
    resolve_device(device)
    resolve_device(draft_device)
    draft = None if draft_quantize == SAME_AS_TARGET else draft_quantize
    check_fast(fast, **asked, draft_quantize=draft)
    use_cuda_graphs(device, asked["cuda_graphs"], static=asked["static"], compile=asked["compile"])
    check_cpu_only_options(device, quantize=asked["quantize"])
    check_cpu_only_options(draft_device, draft_quantize=draft)


def _fast_of(
    asked: dict[str, Any],
    devices: tuple[DeviceArg, DeviceArg],
    quantizes: tuple[str | None, str | None],
) -> list[dict[str, Any]]:
    """make_fast's keywords for the target and the draft on their `devices`, each with its
    quantization: graphs where a device is a CUDA GPU (cuda_graphs=True was checked for the
    target's before anything loaded)."""
    static, compile, graphs = asked["static"], asked["compile"], asked["cuda_graphs"]
    return [
        {
            "static": static,
            "compile": compile,
            "quantize": quantize,
            "graphs": use_cuda_graphs(
                device, graphs and is_cuda(device), static=static, compile=compile
            ),
        }
        for device, quantize in zip(devices, quantizes, strict=True)
    ]


def _fitting_choice(
    choice: FastChoice | None, memory: tuple[str, torch.dtype, ModelPreset, ModelPreset]
) -> FastChoice | None:
    """`choice`, off the static path where its copy of the target does not fit in memory
    (the pair alone may: `_check_pair_memory` decides that next)."""
    if choice is None or not choice.static:
        return choice
    try:
        _check_pair_memory(*memory, True)
    except InsufficientMemoryError:
        model_cache.say(
            "fast='auto': too little memory for the static path's copy of the target, so the "
            "models run as loaded (the draft's quantization and prompt lookup stay)"
        )
        return choice.without_static("too little memory for the static path's copy")
    return choice


@dataclass(frozen=True)
class NamedModels:
    """A target and its draft loaded by name, with their tokenizers."""

    target: Any
    draft: Any  # None: decode with the target alone
    tokenizer: PreTrainedTokenizerBase  # the target's
    draft_tokenizer: PreTrainedTokenizerBase | None = None  # set only when it differs: the
    #                                  draft drafts through text (assistant_tokenizer=)
    fast: FastChoice | None = None  # what fast="auto" chose; None: the models as asked


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
    fast: str | None = None,
    cuda_graphs: bool | None = None,
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
    static, compile, quantize, draft_quantize, cuda_graphs: the fast path, as in load_pair.
    with_draft=False: the draft is neither loaded nor returned (None), e.g. for --no-draft.
    other_tokenizer: a named `draft` of another family keeps its own tokenizer
    (`draft_tokenizer`, for generate()'s assistant_tokenizer=) instead of being refused.
    draft_engine: "torch", or "llamacpp": the draft's GGUF (`draft` a .gguf file or a
    preset, else the pair's draft) run by llama.cpp (backends/llamacpp.py).
    fast="auto": the fast path chosen for this machine, as in load_pair (a named model the
    static path cannot run stays as loaded); the choice is the result's `fast`.
    """
    if draft_engine not in ("torch", "llamacpp"):
        raise ConfigError(f"unknown draft_engine {draft_engine!r}: choose 'torch' or 'llamacpp'")
    _check_device(device, quantize, (draft_quantize, draft_engine) if with_draft else None)
    if draft_engine == "llamacpp" and with_draft:
        gguf = llamacpp_gguf(pair, target, draft, draft_quantize, other_tokenizer)
        where = {"dtype": dtype, "threads": threads, "device": device, "fast": fast}
        options = {"static": static, "compile": compile, "quantize": quantize, **where}
        options["cuda_graphs"] = cuda_graphs
        alone = load_model_set(pair, target=target, with_draft=False, **options)
        return replace(alone, draft=LlamaCppAdapter(gguf, threads=threads))
    tiny_pair = target is None and (pair or DEFAULT_PAIR).strip().lower() == "tiny"
    asked = {"static": static, "compile": compile, "quantize": quantize, "cuda_graphs": cuda_graphs}
    if target is None and not tiny_pair and with_draft:  # load_pair chooses (and fits) itself
        where = {"dtype": dtype, "threads": threads, "device": device, "fast": fast}
        loaded = load_pair(pair, **where, **asked, draft_quantize=draft_quantize)
        return NamedModels(loaded.target, loaded.draft, loaded.tokenizer, fast=loaded.fast)
    tiny_dtype = "float32" if tiny_pair and dtype is None else dtype  # the tiny pair's
    choice, static, draft_quantize = _resolve_fast(fast, device, tiny_dtype, asked, draft_quantize)
    options = {"static": static, "compile": compile, "quantize": quantize}
    options["graphs"] = use_cuda_graphs(device, cuda_graphs, static=static, compile=compile)
    draft_options = {**options, "quantize": draft_quantize, "draft": True}
    if tiny_pair:
        set_threads(threads or 1)
        models = _tiny_models(tiny, dtype, device, options, draft_options if with_draft else None)
        return replace(models, fast=choice)
    if target is None:
        target = get_pair_preset(default_pair_name() if pair is None else pair).target
    models = _load_named_models(
        target,
        draft if with_draft else None,
        dtype=dtype,
        threads=threads,
        device=device,
        fast=options,
        draft_fast=draft_options,
        other_tokenizer=other_tokenizer,
        fall_back=choice is not None,
    )
    return replace(models, fast=choice)


def _resolve_fast(
    fast: str | None,
    device: DeviceArg,
    dtype: str | None,
    asked: dict[str, Any],
    draft_quantize: str | None,
) -> tuple[FastChoice | None, bool, str | None]:
    """(the choice, static, draft_quantize): fast="auto"'s for this machine, else the
    caller's `asked` static and draft_quantize (SAME_AS_TARGET: the target's quantize)."""
    given = None if draft_quantize == SAME_AS_TARGET else draft_quantize
    check_fast(fast, **asked, draft_quantize=given)
    if fast is None:
        same = draft_quantize == SAME_AS_TARGET
        return None, asked["static"], asked["quantize"] if same else draft_quantize
    choice = choose_fast(device, dtype)
    return choice, choice.static, choice.draft_quantize


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
    fall_back: bool = False,
) -> NamedModels:
    """A target and a draft named by preset, folder, GGUF or hub id. Their tokenizers must
    agree, unless `other_tokenizer`: a draft of another family then keeps its own tokenizer
    (`draft_tokenizer`, for generate()'s assistant_tokenizer=: drafts through text).
    `fall_back`: a target the fast path cannot run stays as loaded (fast="auto")."""
    names = (os.fspath(target), os.fspath(draft or ""))
    if draft is not None and not other_tokenizer:  # two GGUFs: their headers, first
        sources = [gguf_source(name, _gguf_dtype(dtype, device)) for name in (target, draft)]
        check_gguf_pair(*sources, target_name=names[0], draft_name=names[1])
    where = {"dtype": dtype, "threads": threads, "device": device}
    loaded, tokenizer = _load_model(target, **where)
    target_model = _fast_model(loaded, fast, names[0], "target", fall_back=fall_back)
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
    draft_model = _fast_model(draft_model, draft_fast, names[1], "draft", fall_back=True)
    return NamedModels(target_model, draft_model, tokenizer, own)


def _fast_model(
    model: PreTrainedModel, options: dict[str, Any], name: str, role: str, *, fall_back: bool
) -> Any:
    """The model on the fast path where it can run there; else, with `fall_back` (any draft:
    the target's fast path is what verification needs, and a draft keeps the output; a
    target under fast="auto") the transformers model (e.g. Gemma 3's sliding-window
    layers), said on stderr."""
    try:
        return make_fast(model, **options, release=True, progress=fast_copy_label(name))
    except UnsupportedModelError:
        if not fall_back:
            raise
        model_cache.say(
            f"{name}: the {role} runs on transformers' forward (the fast path does not run "
            f"{type(model).__name__})"
        )
        return model


def eos_token_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    """The ids that end generation: the model's generation config's, else the tokenizer's."""
    return eos_ids(None, model) or eos_ids(getattr(tokenizer, "eos_token_id", None), None)
