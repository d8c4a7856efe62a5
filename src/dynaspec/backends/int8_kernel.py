"""The int8 matmul for float32 activations on AVX2 (csrc/int8_matmul.cpp), built once.

torch's int8 kernels do not pay on a CPU without AVX512: measured on the 2-core AMD EPYC
(Zen 3, AVX2 only), one 1536 -> 8960 layer, milliseconds per call of T tokens:

    T                               1      2      4      8     16
    float32, oneDNN prepacked     4.1    4.7    5.6    7.2    8.6
    int8, torch._weight_int8pack  11.8   23.6   61.5  131.0  240.2
    int8, torch._int_mm (int8 x)  16.7   33.9   78.5  127.3  266.6

(the machine is noisy: +-30% between runs). This kernel reads each int8 code once per tile
of 8 rows, widens it to float32 in registers and uses it for 1-3 tokens at once. Ten 1536 ->
8960 and five 8960 -> 1536 layers (206 MB of codes, more than the caches), same machine,
milliseconds for all 15 (2 threads; float32 weights would be 823 MB, about 60 ms at the
memory's speed):

    T                               1      2      4      8     16
    int8, this kernel            16.3   21.6   27.8   41.7   73.0

A row of a T-token product is bitwise the one-token product (see the source).

It is compiled at first use with the system C++ compiler (`$CXX`, else `c++`/`g++`; about 2
seconds) into the cache (`$DYNASPEC_CACHE/kernels`), linked to torch's own OpenMP runtime, and
loaded with ctypes. Where it cannot be (no compiler, no AVX2/FMA, not x86-64, or
`DYNASPEC_INT8_KERNEL=0`), `available()` is False and int8 layers use torch's kernels.
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
from pathlib import Path

import torch

from dynaspec.cpu import cpuinfo_text, flags_line
from dynaspec.paths import default_cache_dir

SOURCE = Path(__file__).with_name("csrc") / "int8_matmul.cpp"
FLAGS = ("-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared")
ENV_SWITCH = "DYNASPEC_INT8_KERNEL"  # "0": never use the kernel

_lock = threading.Lock()
_state: dict[str, object] = {}  # "function": the ctypes function, or "reason": why none


def available() -> bool:
    """Whether the kernel runs here (builds it at the first call)."""
    return _function() is not None


def unavailable_reason() -> str | None:
    """Why the kernel does not run here (None when it does)."""
    _function()
    reason = _state.get("reason")
    return None if reason is None else str(reason)


def supports(out_features: int, in_features: int) -> bool:
    """Whether a layer of these widths can use the kernel (tiles of 8 rows by 8 columns)."""
    return out_features % 8 == 0 and in_features % 8 == 0 and available()


def tiled(codes: torch.Tensor) -> torch.Tensor:
    """(N, K) int8 codes in the kernel's layout: tiles of 8 rows interleaved by 8 columns,
    (N/8, K/8, 8, 8), so that one tile is one sequential stream (see the source)."""
    rows, columns = codes.shape
    return codes.view(rows // 8, 8, columns // 8, 8).permute(0, 2, 1, 3).contiguous()


def untiled(tiled_codes: torch.Tensor) -> torch.Tensor:
    """The (N, K) codes back from `tiled(codes)`."""
    blocks, columns, _, _ = tiled_codes.shape
    return tiled_codes.permute(0, 2, 1, 3).reshape(blocks * 8, columns * 8)


@torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
def int8_matmul(
    rows: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """(rows (M, K) float32 @ q.T) * scale (N,) + bias (N,): (M, N) float32, where `codes` is
    `tiled(q)` for the int8 codes q (N, K)."""
    function = _function()
    if function is None:
        raise RuntimeError(f"the int8 kernel is not available: {unavailable_reason()}")
    rows = rows.to(torch.float32).contiguous()
    num_out = codes.shape[0] * 8
    out = torch.empty(rows.shape[0], num_out, dtype=torch.float32)
    function(
        rows.data_ptr(),
        rows.shape[0],
        rows.shape[1],
        codes.data_ptr(),
        scale.data_ptr(),
        None if bias is None else bias.data_ptr(),
        num_out,
        out.data_ptr(),
        torch.get_num_threads(),
    )
    return out


def _function() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    if "function" in _state:
        return _state["function"]  # type: ignore[return-value]
    with _lock:
        if "function" not in _state:
            function, reason = _load()
            _state["function"], _state["reason"] = function, reason
    return _state["function"]  # type: ignore[return-value]


def readiness() -> str:
    """One line on the kernel without building it (`dynaspec models`)."""
    if _state.get("function") is not None:
        return "int8 kernel (--quantize int8 in float32): built"
    problem = _state.get("reason") or _problem()
    if problem:
        return f"int8 kernel: not used ({problem}); int8 layers use torch's kernels"
    return "int8 kernel (--quantize int8 in float32): ready (compiled once, at first use)"


def _problem() -> str | None:
    """Why the kernel cannot be built here (None: it can)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return f"{ENV_SWITCH}=0"
    if platform.machine().lower() not in ("x86_64", "amd64") or not sys.platform.startswith(
        "linux"
    ):
        return f"built for Linux on x86-64 only (this is {sys.platform} {platform.machine()})"
    if not _cpu_has("avx2", "fma"):
        return "the CPU has no AVX2 and FMA"
    if _compiler() is None:
        return "no C++ compiler (install g++, or set CXX)"
    return None


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")


def _load() -> tuple[object | None, str | None]:
    problem = _problem()
    compiler = _compiler()
    if problem is not None or compiler is None:
        return None, problem
    try:
        library = _build(compiler)
        loaded = ctypes.CDLL(str(library))
    except subprocess.CalledProcessError as error:
        return None, f"{Path(compiler).name} failed on {SOURCE.name}: {error.stderr[-400:]}"
    except OSError as error:
        return None, f"building or loading {SOURCE.name} failed: {error}"
    function = loaded.dynaspec_int8_matmul
    pointer, integer = ctypes.c_void_p, ctypes.c_int
    function.argtypes = [
        pointer,
        integer,
        integer,
        pointer,
        pointer,
        pointer,
        integer,
        pointer,
        integer,
    ]
    function.restype = None
    return function, None


def _cpu_has(*flags: str) -> bool:
    present = flags_line(cpuinfo_text()) or frozenset()
    return all(flag in present for flag in flags)


def _openmp_runtime() -> Path | None:
    """torch's own libgomp, so that the kernel and torch share one OpenMP thread pool."""
    folder = Path(torch.__file__).parent / "lib"
    return next(iter(sorted(folder.glob("libgomp*.so*"))), None)


def _build(compiler: str) -> Path:
    """The compiled library in the cache (built once per source, flags, compiler, torch)."""
    runtime = _openmp_runtime()
    link = [str(runtime), f"-Wl,-rpath,{runtime.parent}"] if runtime else []
    key = hashlib.sha256(
        SOURCE.read_bytes() + repr((FLAGS, compiler, link, torch.__version__)).encode()
    ).hexdigest()[:16]
    folder = default_cache_dir() / "kernels"
    library = folder / f"int8_matmul-{key}.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dynaspec: compiling the int8 kernel into {folder} (once)", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        built = Path(scratch) / library.name
        command = [compiler, *FLAGS, "-o", str(built), str(SOURCE), "-Wl,--no-as-needed", *link]
        subprocess.run(command, check=True, capture_output=True, text=True)
        os.replace(built, library)  # atomic: another process may build the same one
    return library
