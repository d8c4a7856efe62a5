"""OpenVINO GenAI as peers of `dynaspec bench`: its target alone, its speculative decoding
with the draft model, and its prompt lookup, fed the same prompt token ids as dynaspec.

A CPU user choosing a speculative decoder would also look at OpenVINO GenAI, so the bench
runs its `LLMPipeline` with the settings OpenVINO's own samples use (`OPENVINO_METHODS`):
speculative decoding with `num_assistant_tokens=5` (and a variant that stops drafting below
`assistant_confidence_threshold=0.4`), prompt lookup with `num_assistant_tokens=5` and
`max_ngram_size=3`. Greedy; each call stops at an EOS or after `max_new_tokens`, like every
method of the bench, and is timed from outside.

Prefix caching is off: OpenVINO GenAI's `LLMPipeline` keeps the KV blocks of earlier prompts
by default (its latency-oriented scheduler), so a second call with the same prompt skips the
prompt's evaluation (on a 265-token prompt, its int8 prompt lookup: 3.41 s, then 1.80 s; off:
3.15 s, then 3.07 s). dynaspec and the other peers evaluate every prompt in full, and so does
every timed call here (`scheduler_config`).

Weights: the model folders the bench loaded (the target and the draft), exported once to
OpenVINO IR with `optimum-cli export openvino` in int8 (OpenVINO's default for models of a
billion parameters and more: per-channel asymmetric int8 weights, dynamic quantization of
activations and a u8 KV cache as the CPU plugin chooses) or fp32 (the `-fp32` methods:
weights, activations and KV cache in float32, `FP32_PROPERTIES`, a same-precision
comparison with dynaspec's float32 methods). The export runs in a virtual environment of its
own (scripts/openvino-venv.sh: optimum-intel needs another transformers than dynaspec's) and
is cached under the dynaspec cache folder (`ir_folder`); the generation runs here, with
`pip install "dynaspec[openvino]"` (openvino-genai needs neither torch nor transformers).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

import torch

from dynaspec.errors import ConfigError, MissingDependencyError, ModelNotAvailableError
from dynaspec.models.cache import resolve_cache_dir, writable_folder

INSTALL_HINT = 'pip install "dynaspec[openvino]" (openvino-genai, beside torch and transformers)'
EXPORT_PYTHON_ENV = "DYNASPEC_OPENVINO_EXPORT_PYTHON"
EXPORT_HINT = (
    "bash scripts/openvino-venv.sh (a virtual environment with optimum-intel[openvino], which "
    f"needs another transformers than dynaspec's; about 3 minutes), or set {EXPORT_PYTHON_ENV} "
    "to a python that has optimum-intel[openvino]"
)
WEIGHT_FORMATS = ("int8", "fp32")
# The -fp32 methods: float32 all through, as dynaspec's float32 methods compute.
FP32_PROPERTIES: dict[str, str] = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}
_DONE = "dynaspec-export.json"  # written last into a finished IR folder
# Pipelines of these formats are held one at a time: the CPU plugin repacks each compiled
# model's weights (about 6 GB per fp32 pipeline of the 1.5B target), so three of them beside
# the bench's own float32 pair do not fit in 24 GB. Switching rebuilds one, untimed, and warms
# it up with `WARMUP_TOKENS` new tokens on the prompt's head before the timed call.
ONE_AT_A_TIME = ("fp32",)
WARMUP_TOKENS = 4


@dataclass(frozen=True)
class OpenVinoMethod:
    """One OpenVINO GenAI method: which pipeline, with which generation settings."""

    name: str  # as given to --methods
    weights: str  # "int8" or "fp32" (the IR's weight format)
    pipeline: str  # "target" (alone), "draft" (draft_model=...) or "lookup" (prompt_lookup)
    settings: Mapping[str, Any] = field(default_factory=dict)  # GenerationConfig fields
    reference: str | None = None  # the method whose output it must equal: its target alone
    description: str = ""


def _methods(suffix: str, weights: str) -> tuple[OpenVinoMethod, ...]:
    alone = f"openvino-target{suffix}"
    return (
        OpenVinoMethod(alone, weights, "target", description=f"OpenVINO GenAI, {weights} alone"),
        OpenVinoMethod(
            f"openvino-spec{suffix}",
            weights,
            "draft",
            {"num_assistant_tokens": 5},
            alone,
            f"OpenVINO GenAI speculative, {weights}, 5 draft tokens a round",
        ),
        OpenVinoMethod(
            f"openvino-spec-confidence{suffix}",
            weights,
            "draft",
            {"assistant_confidence_threshold": 0.4},
            alone,
            f"OpenVINO GenAI speculative, {weights}, drafts while confidence >= 0.4",
        ),
        OpenVinoMethod(
            f"openvino-prompt-lookup{suffix}",
            weights,
            "lookup",
            {"num_assistant_tokens": 5, "max_ngram_size": 3},
            alone,
            f"OpenVINO GenAI prompt lookup, {weights} (5 tokens, n-grams up to 3)",
        ),
    )


OPENVINO_METHODS: dict[str, OpenVinoMethod] = {
    method.name: method for method in (*_methods("", "int8"), *_methods("-fp32", "fp32"))
}


@dataclass(frozen=True)
class OpenVinoResult:
    """One greedy OpenVINO GenAI generation."""

    new_ids: list[int]  # generated token ids (EOS included when it came)
    wall_time_s: float  # the call, prompt evaluation included
    ir: str  # the IR folder(s) it ran: the target's, then the draft's (comma-separated)


def export_python(environ: Mapping[str, str] | None = None) -> Path:
    """The python that exports (has optimum-intel): $DYNASPEC_OPENVINO_EXPORT_PYTHON, else the
    one scripts/openvino-venv.sh makes under the cache folder. MissingDependencyError if none."""
    environ = os.environ if environ is None else environ
    named = environ.get(EXPORT_PYTHON_ENV)
    python = Path(named) if named else resolve_cache_dir() / "venvs/openvino-export/bin/python"
    if not python.is_file():
        where = f"{EXPORT_PYTHON_ENV}={named} is not a file" if named else f"no {python}"
        raise MissingDependencyError(
            f"exporting a model to OpenVINO IR needs optimum-intel in its own environment "
            f"({where}): {EXPORT_HINT}"
        )
    return python


def ir_folder(model_folder: str | os.PathLike[str], weights: str, cache_dir: Any = None) -> Path:
    """Where the IR of `model_folder` in `weights` is cached: <cache>/openvino/<name>-<weights>."""
    if weights not in WEIGHT_FORMATS:
        raise ConfigError(f"OpenVINO weight format {weights!r}: choose one of {WEIGHT_FORMATS}")
    name = Path(model_folder).resolve().name
    return resolve_cache_dir(cache_dir) / "openvino" / f"{name}-{weights}"


def export_command(python: Path, model_folder: Path, weights: str, out: Path) -> list[str]:
    """optimum-cli's export of a causal LM with its KV cache, weights in `weights`."""
    return [
        str(python),
        "-m",
        "optimum.commands.optimum_cli",
        "export",
        "openvino",
        "--model",
        str(model_folder),
        "--task",
        "text-generation-with-past",
        "--weight-format",
        weights,
        str(out),
    ]


def ensure_ir(
    model_folder: str | os.PathLike[str],
    weights: str,
    *,
    cache_dir: Any = None,
    python: Path | None = None,
) -> Path:
    """The cached IR of `model_folder` in `weights`, exported first if it is not there yet
    (offline, with a message on stderr; a failed export leaves nothing behind)."""
    source = Path(model_folder)
    if not (source / "config.json").is_file():
        raise ModelNotAvailableError(
            f"{source} is not a model folder (no config.json): the OpenVINO methods export "
            "the bench's --target/--draft folders or the preset pair's cached folders"
        )
    dest = ir_folder(source, weights, cache_dir)
    if (dest / _DONE).is_file():
        return dest
    python = python or export_python()
    writable_folder(dest.parent)
    partial = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    print(
        f"dynaspec: exporting {source} to OpenVINO IR ({weights} weights) with optimum-cli "
        f"-> {dest} (once; a few minutes for a 1.5B model)",
        file=sys.stderr,
        flush=True,
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = export_command(python, source, weights, partial)
    start = perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not (partial / "openvino_model.xml").is_file():
        shutil.rmtree(partial, ignore_errors=True)
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise ModelNotAvailableError(
            f"the OpenVINO export of {source} failed (exit status {done.returncode}):\n{tail}\n"
            f"check the export environment ({EXPORT_HINT}); the command was: {' '.join(command)}"
        )
    facts = {"source": str(source.resolve()), "weights": weights, "command": command}
    facts["export_time_s"] = round(perf_counter() - start, 1)
    (partial / _DONE).write_text(json.dumps(facts, indent=1) + "\n", encoding="utf-8")
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)
    print(f"dynaspec: exported in {facts['export_time_s']:.0f} s", file=sys.stderr, flush=True)
    return dest


def import_genai() -> Any:
    """openvino_genai, or MissingDependencyError with the install command."""
    try:
        import openvino_genai
    except ImportError as error:
        raise MissingDependencyError(
            f"the openvino-* methods need openvino-genai: {INSTALL_HINT}"
        ) from error
    return openvino_genai


def device_properties(weights: str, threads: int) -> dict[str, Any]:
    """The CPU plugin's properties for a pipeline of `weights`."""
    properties: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads}
    if weights == "fp32":
        properties.update(FP32_PROPERTIES)
    return properties


def scheduler_config(genai: Any) -> Any:
    """The scheduler settings of every pipeline and draft: prefix caching off, so that each
    call evaluates its whole prompt (the module docstring)."""
    config = genai.SchedulerConfig()
    config.enable_prefix_caching = False
    return config


def generation_config(genai: Any, method: OpenVinoMethod, max_new_tokens: int, eos: Sequence[int]):
    """The GenerationConfig of one greedy call of `method`."""
    config = genai.GenerationConfig()
    config.max_new_tokens = max_new_tokens
    config.do_sample = False
    config.ignore_eos = False
    if eos:
        config.eos_token_id = int(eos[0])
        config.stop_token_ids = {int(token) for token in eos}
    for key, value in method.settings.items():
        setattr(config, key, value)
    return config


class OpenVinoPeers:
    """The OpenVINO GenAI pipelines of a bench run, built on first use (one per pipeline kind
    and weight format, those of `ONE_AT_A_TIME` formats one at a time; the exports are cached
    on disk)."""

    def __init__(
        self,
        target_folder: str | os.PathLike[str],
        draft_folder: str | os.PathLike[str] | None,
        threads: int,
        cache_dir: Any = None,
    ) -> None:
        self.genai = import_genai()
        self.folders = {"target": target_folder, "draft": draft_folder}
        self.threads = threads
        self.cache_dir = cache_dir
        self.pipelines: dict[tuple[str, str], Any] = {}
        self.build_time_s: dict[str, float] = {}  # "draft-int8" -> seconds (export excluded)
        self.builds: Counter[str] = Counter()  # "target-fp32" -> times built (ONE_AT_A_TIME)

    def ir(self, role: str, weights: str) -> Path:
        """The IR folder of the target or the draft (`role`) in `weights`, exported if needed."""
        folder = self.folders[role]
        if folder is None:
            raise ConfigError(f"the openvino-spec methods need a {role} model folder")
        return ensure_ir(folder, weights, cache_dir=self.cache_dir)

    def pipeline(self, kind: str, weights: str) -> tuple[Any, bool]:
        """The LLMPipeline of `kind` ("target", "draft", "lookup") in `weights`, and whether it
        was built by this call."""
        key = (kind, weights)
        if key in self.pipelines:
            return self.pipelines[key], False
        if weights in ONE_AT_A_TIME:
            for other in [k for k in self.pipelines if k[1] == weights]:
                del self.pipelines[other]
            gc.collect()
        target = self.ir("target", weights)
        extra: dict[str, Any] = {"scheduler_config": scheduler_config(self.genai)}
        if kind == "draft":
            draft = self.ir("draft", weights)
            props = device_properties(weights, self.threads)
            props["scheduler_config"] = scheduler_config(self.genai)
            extra["draft_model"] = self.genai.draft_model(str(draft), "CPU", **props)
        elif kind == "lookup":
            extra["prompt_lookup"] = True
        start = perf_counter()
        self.pipelines[key] = self.genai.LLMPipeline(
            str(target), "CPU", **device_properties(weights, self.threads), **extra
        )
        self.build_time_s[f"{kind}-{weights}"] = round(perf_counter() - start, 3)
        self.builds[f"{kind}-{weights}"] += 1
        return self.pipelines[key], True

    def generate(
        self, name: str, input_ids: torch.Tensor, max_new_tokens: int, eos: Sequence[int]
    ) -> OpenVinoResult:
        """Method `name` on the (1, T) prompt: greedy, at most `max_new_tokens`, EOS ends it."""
        import numpy as np
        import openvino

        method = OPENVINO_METHODS[name]
        pipe, built = self.pipeline(method.pipeline, method.weights)
        config = generation_config(self.genai, method, max_new_tokens, eos)
        ids = np.asarray(input_ids.cpu().numpy(), dtype=np.int64)
        if built:  # untimed: a fresh pipeline's first call pays one-time costs
            warmup = generation_config(self.genai, method, WARMUP_TOKENS, eos)
            pipe.generate(openvino.Tensor(np.ascontiguousarray(ids[:, :16])), warmup)
        prompt = openvino.Tensor(ids)
        start = perf_counter()
        result = pipe.generate(prompt, config)
        wall = perf_counter() - start
        new_ids = [int(token) for token in result.tokens[0]]
        folders = [self.ir("target", method.weights)]
        if method.pipeline == "draft":
            folders.append(self.ir("draft", method.weights))
        return OpenVinoResult(new_ids, wall, ",".join(map(str, folders)))

    def facts(self) -> dict[str, Any]:
        """What the run's records say about the pipelines: IR folders, properties, settings."""
        return {
            "methods": {
                name: {"weights": m.weights, "pipeline": m.pipeline, **m.settings}
                for name, m in OPENVINO_METHODS.items()
            },
            "properties": {w: device_properties(w, self.threads) for w in WEIGHT_FORMATS},
            "folders": {role: str(folder) for role, folder in self.folders.items()},
            "one_at_a_time": list(ONE_AT_A_TIME),
            "warmup_tokens_after_a_build": WARMUP_TOKENS,
            "prefix_caching": False,  # every call evaluates its whole prompt
        }
