"""dynaspec's compiled CPU kernels (csrc/*.cpp): built once with the system C++ compiler and
loaded with ctypes, or set aside with the reason why.

A kernel is compiled at its first use (`$CXX`, else `c++`/`g++`; about 2 seconds) into the
cache (`$DYNASPEC_CACHE/kernels`, one file per source and the headers beside it, flags,
compiler and torch version),
linked to torch's own OpenMP runtime so that both share one thread pool. Where it cannot be
(no compiler, a CPU without the instructions it needs, not Linux on x86-64, or its switch
set to 0), `function()` is None and the callers use torch's kernels instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dynaspec.cpu import cpuinfo_text, flags_line
from dynaspec.paths import default_cache_dir

CSRC = Path(__file__).with_name("csrc")
COMMON_FLAGS = ("-O3", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared")


@dataclass(frozen=True)
class KernelSpec:
    """What a kernel is built from and needs."""

    name: str  # "int8": the source csrc/{name}_{entry}.cpp, the symbol dynaspec_{name}_{entry}
    argtypes: tuple[object, ...]  # ctypes types of the C function's arguments
    cpu_flags: tuple[str, ...]  # /proc/cpuinfo flags it needs (also its -m flags, less "_")
    use: str  # what it serves, for `dynaspec models`: "--quantize int8 in float32"
    bf16_out: bool = False  # its C function takes a last int: 1 writes y as bf16
    entry: str = "matmul"  # what the C function computes (its source's and symbol's suffix)

    @property
    def source(self) -> Path:
        return CSRC / f"{self.name}_{self.entry}.cpp"

    @property
    def switch(self) -> str:
        """The environment variable that turns it off with "0"."""
        return f"DYNASPEC_{self.name.upper()}_KERNEL"

    @property
    def flags(self) -> tuple[str, ...]:
        # /proc/cpuinfo's "avx512_bf16" is the compiler's -mavx512bf16
        return (*COMMON_FLAGS, *(f"-m{flag.replace('_', '')}" for flag in self.cpu_flags))


@dataclass
class Kernel:
    """A kernel's build state: its ctypes function once built, or why there is none."""

    spec: KernelSpec
    state: dict[str, object] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def function(self) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
        """The C function (built at the first call), or None."""
        if "function" not in self.state:
            with self.lock:
                if "function" not in self.state:
                    function, reason = self.load()
                    self.state["function"], self.state["reason"] = function, reason
        return self.state["function"]  # type: ignore[return-value]

    def available(self) -> bool:
        """Whether the kernel runs here (builds it at the first call)."""
        return self.function() is not None

    def unavailable_reason(self) -> str | None:
        """Why the kernel does not run here (None when it does)."""
        self.function()
        reason = self.state.get("reason")
        return None if reason is None else str(reason)

    def readiness(self) -> str:
        """One line on the kernel without building it (`dynaspec models`)."""
        name = self.spec.name
        if self.state.get("function") is not None:
            return f"{name} kernel ({self.spec.use}): built"
        problem = self.state.get("reason") or self.problem()
        if problem:
            return f"{name} kernel: not used ({problem}); {name} layers use torch's kernels"
        return f"{name} kernel ({self.spec.use}): ready (compiled once, at first use)"

    def problem(self) -> str | None:
        """Why the kernel cannot be built here (None: it can)."""
        if os.environ.get(self.spec.switch, "1") == "0":
            return f"{self.spec.switch}=0"
        machine = platform.machine().lower()
        if machine not in ("x86_64", "amd64") or not sys.platform.startswith("linux"):
            return f"built for Linux on x86-64 only (this is {sys.platform} {platform.machine()})"
        if not cpu_has(*self.spec.cpu_flags):
            return "the CPU has no " + " and ".join(f.upper() for f in self.spec.cpu_flags)
        if compiler() is None:
            return "no C++ compiler (install g++, or set CXX)"
        return None

    def load(self) -> tuple[object | None, str | None]:
        """(the ctypes function, None), or (None, why not)."""
        problem = self.problem()
        command = compiler()
        if problem is not None or command is None:
            return None, problem
        source = self.spec.source
        try:
            library = ctypes.CDLL(str(build(self.spec, command)))
        except subprocess.CalledProcessError as error:
            return None, f"{Path(command).name} failed on {source.name}: {error.stderr[-400:]}"
        except OSError as error:
            return None, f"building or loading {source.name} failed: {error}"
        function = getattr(library, f"dynaspec_{self.spec.name}_{self.spec.entry}")
        function.argtypes = list(self.spec.argtypes)
        function.restype = None
        return function, None


def scaled_matmul(
    kernel: Kernel,
    rows: torch.Tensor,
    codes: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor | None,
    num_out: int,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(rows @ q.T) * scale + bias, (M, N) float32 (or bf16 where the kernel writes it), by an
    int8 kernel whose C function takes (x, T, K, codes, scale, bias, N, y, threads[, bf16]);
    `rows` (M, K) contiguous in its dtype."""
    return _call(kernel, rows, (codes, scale, bias), num_out, out_dtype)


def packed_matmul(
    kernel: Kernel,
    rows: torch.Tensor,
    packed: torch.Tensor,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """rows @ w.T + bias, (M, N) float32 (or bf16), by a 4-bit kernel whose C function takes
    (x, T, K, packed, bias, N, y, threads, bf16) and whose layout holds 64 rows a tile
    (`packed.shape[0]` tiles); `rows` (M, K) contiguous in its dtype."""
    return _call(kernel, rows, (packed, bias), packed.shape[0] * 64, out_dtype)


def _call(
    kernel: Kernel,
    rows: torch.Tensor,
    operands: tuple[torch.Tensor | None, ...],
    num_out: int,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    function = kernel.function()
    name = kernel.spec.name
    if function is None:
        raise RuntimeError(f"the {name} kernel is not available: {kernel.unavailable_reason()}")
    bf16 = out_dtype == torch.bfloat16
    if bf16 and not kernel.spec.bf16_out:
        raise ValueError(f"the {name} kernel writes float32 only, not {out_dtype}")
    out = torch.empty(rows.shape[0], num_out, dtype=out_dtype)
    pointers = [None if t is None else t.data_ptr() for t in operands]
    extra = (int(bf16),) if kernel.spec.bf16_out else ()
    function(
        rows.data_ptr(),
        rows.shape[0],
        rows.shape[1],
        *pointers,
        num_out,
        out.data_ptr(),
        torch.get_num_threads(),
        *extra,
    )
    return out


def compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def cpu_has(*flags: str) -> bool:
    present = flags_line(cpuinfo_text()) or frozenset()
    return all(flag in present for flag in flags)


def _openmp_runtime() -> Path | None:
    """torch's own libgomp, so that the kernels and torch share one OpenMP thread pool."""
    folder = Path(torch.__file__).parent / "lib"
    return next(iter(sorted(folder.glob("libgomp*.so*"))), None)


def build(spec: KernelSpec, command: str) -> Path:
    """The compiled library in the cache (built once per source, flags, compiler, torch)."""
    runtime = _openmp_runtime()
    link = [str(runtime), f"-Wl,-rpath,{runtime.parent}"] if runtime else []
    source = spec.source
    headers = b"".join(path.read_bytes() for path in sorted(CSRC.glob("*.h")))  # included
    key = hashlib.sha256(
        source.read_bytes()
        + headers
        + repr((spec.flags, command, link, torch.__version__)).encode()
    ).hexdigest()[:16]
    folder = default_cache_dir() / "kernels"
    library = folder / f"{source.stem}-{key}.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"dynaspec: compiling the {spec.name} kernel into {folder} (once)",
        file=sys.stderr,
        flush=True,
    )
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        built = Path(scratch) / library.name
        arguments = [command, *spec.flags, "-o", str(built), str(source), "-Wl,--no-as-needed"]
        subprocess.run([*arguments, *link], check=True, capture_output=True, text=True)
        os.replace(built, library)  # atomic: another process may build the same one
    return library
