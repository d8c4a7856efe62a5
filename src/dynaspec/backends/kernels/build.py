"""Building dynaspec's compiled CPU kernels (csrc/*.cpp): once, with the system C++ compiler,
loaded with ctypes (`base.CompiledKernel` loads them, or sets them aside with the reason why).

A kernel is compiled at its first use (`$CXX`, else `c++`/`g++`; about 2 seconds) into the
cache (`$DYNASPEC_CACHE/kernels`, one file per source and the headers beside it, flags,
compiler and torch version),
linked to torch's own OpenMP runtime so that both share one thread pool. Where it cannot be
(no compiler, a CPU without the instructions it needs, not Linux on x86-64, or its switch
set to 0), the kernel's `function()` is None and the callers use torch's kernels instead.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
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
