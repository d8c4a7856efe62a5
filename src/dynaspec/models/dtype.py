"""The weights' dtype, chosen for the machine: which CPU instructions it has, and why.

Measured (README, "The dtype is chosen for the machine"): on a CPU with native bf16 matrix
instructions (AVX512-BF16 or AMX) a bf16 forward over 8 new tokens costs about what one
token costs, and bf16 is about twice as fast as float32. On a CPU without them (AVX2 only)
bf16 matrix products are emulated: a bf16 forward grows about linearly with the tokens in
it (about 155 ms per token for a 1.5B model), so verifying a draft is dear, while float32
grows far more slowly. So the default dtype,
"machine", is bf16 where the CPU multiplies bf16 natively, float32 on other CPUs, and bf16
on a GPU that supports it. "auto" keeps transformers' meaning: the checkpoint's own dtype.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

import torch

from dynaspec.cpu import cpuinfo_text, flags_line
from dynaspec.errors import ConfigError

MACHINE = "machine"  # the dtype this machine computes fastest in (see machine_dtype())
AUTO = "auto"  # transformers' meaning: the checkpoint's own dtype (a GGUF: float32)
DTYPE_NAMES = ("bfloat16", "float16", "float32")
DTYPE_CHOICES = (MACHINE, AUTO, *DTYPE_NAMES)  # what --dtype and dtype= accept
DEFAULT_DTYPE = MACHINE  # what loading uses when no dtype is given

# CPU flags (as /proc/cpuinfo spells them) that decide speed; recorded with every result.
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")
_NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # bf16 matrix products in hardware


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's instruction sets that matter for a forward pass."""

    flags: frozenset[str]  # the CPU_FLAGS this CPU has
    torch_capability: str  # torch's kernel level, e.g. "AVX2", "AVX512" (its own detection)
    known: bool  # False where the flags could not be read (not Linux): treated as absent

    @property
    def native_bf16(self) -> tuple[str, ...]:
        """The flags that give native bf16 matrix products (empty: none)."""
        return tuple(flag for flag in _NATIVE_BF16_FLAGS if flag in self.flags)

    def record(self) -> dict[str, object]:
        """For benchmark records: one bool per flag of CPU_FLAGS, and torch's capability."""
        flags: dict[str, object] = {
            flag: (flag in self.flags) if self.known else None for flag in CPU_FLAGS
        }
        return {**flags, "torch_cpu_capability": self.torch_capability}


def parse_cpu_flags(cpuinfo: str) -> frozenset[str] | None:
    """The CPU_FLAGS named on the first `flags` line of /proc/cpuinfo's text (x86 Linux);
    None where there is no such line (another OS or architecture)."""
    flags = flags_line(cpuinfo)
    return None if flags is None else flags & frozenset(CPU_FLAGS)


def cpu_features(cpuinfo: str | None = None) -> CpuFeatures:
    """This CPU's features, read from /proc/cpuinfo (or from `cpuinfo`, its text)."""
    flags = parse_cpu_flags(cpuinfo_text() if cpuinfo is None else cpuinfo)
    capability = torch.backends.cpu.get_cpu_capability()
    return CpuFeatures(flags or frozenset(), capability, known=flags is not None)


@dataclass(frozen=True)
class DtypeChoice:
    """A dtype for the weights, and the reason it was chosen (shown by the CLI, recorded)."""

    dtype: torch.dtype | str  # a torch dtype, or "auto" (the checkpoint's own dtype)
    reason: str  # one clause, e.g. "machine: this CPU has avx512_bf16, so it multiplies ..."

    @property
    def name(self) -> str:
        """ "bfloat16", "float32", ... or "auto"."""
        return str(self.dtype).removeprefix("torch.")

    def line(self) -> str:
        """ "bfloat16 (machine: this CPU has avx512_bf16, so it multiplies bf16 natively)"."""
        return f"{self.name} ({self.reason})"


def machine_dtype(
    device: str | torch.device = "cpu", features: CpuFeatures | None = None
) -> DtypeChoice:
    """The dtype this machine computes fastest in, for models on `device`.

    CPU: bfloat16 where it has native bf16 matrix instructions (AVX512-BF16 or AMX),
    float32 elsewhere (bf16 would be emulated, and verification would cost nearly linearly
    more per drafted token). GPU: bfloat16 where supported, else float16.
    """
    kind = torch.device(device).type
    if kind == "cuda":
        if torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            return DtypeChoice(torch.float16, "machine: this GPU lacks bf16, so float16")
        return DtypeChoice(torch.bfloat16, "machine: a GPU computes bf16 natively")
    if kind != "cpu":
        return DtypeChoice(torch.float32, f"machine: no rule for {kind} devices yet, so float32")
    features = cpu_features() if features is None else features
    if features.native_bf16:
        flags = " and ".join(features.native_bf16)
        return DtypeChoice(
            torch.bfloat16, f"machine: this CPU has {flags}, so it multiplies bf16 natively"
        )
    if not features.known:
        where = f"{platform.system()} {platform.machine()}".strip() or "this machine"
        return DtypeChoice(
            torch.float32, f"machine: no x86 CPU flags to read on {where}, so float32"
        )
    return DtypeChoice(
        torch.float32,
        "machine: this CPU lacks avx512_bf16 and amx_bf16, so bf16 would be emulated and "
        "verifying drafted tokens costs far more than in float32",
    )


def choose_dtype(
    requested: str | torch.dtype | None, device: str | torch.device = "cpu"
) -> DtypeChoice:
    """What `requested` means here: None or "machine" -> machine_dtype(); "auto" -> the
    checkpoint's own dtype; a name ("bf16", "float32", ...) or torch dtype -> that dtype.

    Raises ConfigError for anything else, listing DTYPE_CHOICES.
    """
    if requested is None:
        return machine_dtype(device)
    if isinstance(requested, torch.dtype):
        if str(requested).removeprefix("torch.") not in DTYPE_NAMES:
            raise ConfigError(f"dtype {requested} is not supported: use one of {DTYPE_CHOICES}")
        return DtypeChoice(requested, "as requested")
    if not isinstance(requested, str):
        raise ConfigError(f"dtype must be a string or torch.dtype, got {requested!r}")
    name = requested.strip().lower().removeprefix("torch.")
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32"}
    name = aliases.get(name, name)
    if name == MACHINE:
        return machine_dtype(device)
    if name == AUTO:
        return DtypeChoice(AUTO, "auto: the checkpoint's own dtype")
    if name not in DTYPE_NAMES:
        raise ConfigError(
            f"unknown dtype {requested!r}: use one of {', '.join(DTYPE_CHOICES)}, or None "
            "(machine)",
            cli_message=f"unknown --dtype {requested!r}: use one of {', '.join(DTYPE_CHOICES)}",
        )
    return DtypeChoice(getattr(torch, name), "as requested")


def dtype_choice(
    dtype: str | None, *, pair: str | None = None, device: str | torch.device | None = None
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
