"""Where a model runs: a checked torch.device from the caller's `device=` argument (or the
CLI's --device), the fast-path options that only run on the CPU, and the one that only runs
on a CUDA GPU (CUDA graphs: backends/graphs.py)."""

from __future__ import annotations

import argparse

import torch

from dynaspec.errors import (
    ConfigError,
    CpuOnlyOptionError,
    CudaOnlyOptionError,
    DeviceNotAvailableError,
)

DeviceArg = str | torch.device | None
DEVICE_KINDS = ("cpu", "cuda")  # what --device accepts: cpu, cuda, cuda:N


def resolve_device(device: DeviceArg) -> torch.device | None:
    """A torch.device that exists on this machine, or None (leave the model where it loads).

    Raises ConfigError for a name torch does not know ("gpu"), DeviceNotAvailableError for
    a device this machine does not have ("cuda" without a GPU, "cuda:3" with two).
    """
    if device is None:
        return None
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigError(
            f"unknown device {device!r} ({error}): pass device='cpu', 'cuda' or 'cuda:N'",
            cli_message=f"unknown --device {device!r}: use cpu, cuda or cuda:N",
        ) from error
    if resolved.type == "cuda":
        _check_cuda(str(device), resolved.index)
    return resolved


def _check_cuda(name: str, index: int | None) -> None:
    """DeviceNotAvailableError unless torch can run on CUDA GPU `index` (None: any)."""
    if not torch.cuda.is_available():
        why = (
            "this torch is a CPU-only build (torch.version.cuda is None)"
            if torch.version.cuda is None
            else "torch sees no CUDA GPU on this machine (torch.cuda.is_available() is False)"
        )
        fix = "install a CUDA build of torch on a machine with an NVIDIA GPU"
        raise DeviceNotAvailableError(
            f"device {name!r} asks for a CUDA GPU but {why}: pass device='cpu', or {fix}",
            cli_message=f"--device {name}: {why}: pass --device cpu, or {fix}",
        )
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        raise DeviceNotAvailableError(
            f"device {name!r}: this machine has {count} CUDA GPU(s), numbered 0 to "
            f"{count - 1}: pass one of those",
            cli_message=f"--device {name}: this machine has {count} CUDA GPU(s): pass "
            f"--device cuda:0 to cuda:{count - 1}",
        )


def device_name(text: str) -> str:
    """An argparse type: "cpu", "cuda" or "cuda:N" (any case); whether this machine has it
    is checked after parsing (`resolve_device`), so that --help works everywhere."""
    name = text.strip().lower()
    try:
        kind = torch.device(name).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in DEVICE_KINDS:
        raise argparse.ArgumentTypeError(f"unknown device {text!r}: use cpu, cuda or cuda:N")
    return name


def is_cpu(device: DeviceArg) -> bool:
    """Whether `device` (None: where transformers loads a model) is the CPU."""
    return device is None or torch.device(device).type == "cpu"


def check_cpu_only_options(
    device: DeviceArg,
    *,
    quantize: str | None = None,
    draft_quantize: str | None = None,
    draft_engine: str = "torch",
) -> None:
    """CpuOnlyOptionError when a model on a GPU is asked to run on CPU-only kernels: the
    integer quantizations (dynaspec's and torch's CPU kernels) and llama.cpp's draft."""
    if is_cpu(device):
        return
    asked = [
        (f"quantize={quantize!r}", f"--quantize {quantize}") if quantize else None,
        (f"draft_quantize={draft_quantize!r}", f"--draft-quantize {draft_quantize}")
        if draft_quantize
        else None,
        ("draft_engine='llamacpp'", "--draft-engine llamacpp")
        if draft_engine == "llamacpp"
        else None,
    ]
    given = [pair for pair in asked if pair is not None]
    if given:
        python, cli = (" and ".join(words) for words in zip(*given, strict=True))
        raise CpuOnlyOptionError(
            f"{python} run on CPU kernels only and the models are asked on {device}: drop "
            "them, or pass device='cpu'",
            cli_message=f"{cli} run on CPU kernels only and --device is {device}: drop them, "
            "or pass --device cpu",
        )


def is_cuda(device: DeviceArg) -> bool:
    """Whether `device` (None: the CPU, where transformers loads a model) is a CUDA GPU."""
    return device is not None and torch.device(device).type == "cuda"


def use_cuda_graphs(
    device: DeviceArg, cuda_graphs: bool | None, *, static: bool, compile: bool = False
) -> bool:
    """Whether a model on `device` runs the static path with CUDA graphs (backends/graphs.py).

    `cuda_graphs` None (the default): yes where the static path runs (`static`) on a CUDA
    GPU, not compiled (torch.compile is the other way to the same end); True: yes, which
    turns the static path on (CudaOnlyOptionError off CUDA, ConfigError with `compile`);
    False: never. On the CPU the default is always no: the CPU path never crosses the seam."""
    if cuda_graphs is None:
        return static and not compile and is_cuda(device)
    if cuda_graphs:
        check_cuda_graphs(device, compile)
    return bool(cuda_graphs)


def check_cuda_graphs(device: DeviceArg, compile: bool = False) -> None:
    """CudaOnlyOptionError unless `device` is a CUDA GPU; ConfigError beside `compile`: what
    cuda_graphs=True (--cuda-graphs) needs."""
    where = "the CPU" if device is None else repr(str(device))
    if not is_cuda(device):
        raise CudaOnlyOptionError(
            f"cuda_graphs=True captures forwards as CUDA graphs, on a CUDA GPU only, and the "
            f"models are asked on {where}: drop cuda_graphs=True, or pass device='cuda'",
            cli_message=f"--cuda-graphs captures forwards as CUDA graphs, on a CUDA GPU only, "
            f"and --device is {'cpu' if device is None else device}: drop --cuda-graphs, or "
            "pass --device cuda",
        )
    if compile:
        raise ConfigError(
            "cuda_graphs=True and compile=True are two ways to one end (fewer kernel launches "
            "a forward): pass one of them",
            cli_message="--cuda-graphs and --compile are two ways to one end (fewer kernel "
            "launches a forward): pass one of them",
        )
