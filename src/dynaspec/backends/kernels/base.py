"""The face of a compiled kernel, written once: its spec, its build state, whether it runs here
and why not, and its C call; and the two kinds of quantized matmul the quantizer picks from.

A kernel is a subclass in a file of its own (int8.py, ...) that declares its `SPEC` and its
Python call, and one line in registry.py; `dynaspec models`, the quantizer and the CLI read
the registry. It is built at its first use (build.py); where it cannot be, `available()` is
False, `unavailable_reason()` says why and the callers use torch's kernels instead.
"""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import threading
from pathlib import Path
from typing import ClassVar

import torch

from dynaspec.backends.kernels import int4_codes
from dynaspec.backends.kernels.build import KernelSpec, build, compiler, cpu_has


class CompiledKernel:
    """One compiled kernel: its C function once built (at the first call), or why there is
    none."""

    SPEC: ClassVar[KernelSpec]  # what it is built from and needs

    def __init__(self) -> None:
        self.state: dict[str, object] = {}  # "function" and "reason", once loaded
        self.lock = threading.Lock()

    def __copy__(self) -> CompiledKernel:
        return self  # one kernel a process: a copied layer shares it (and its lock)

    def __deepcopy__(self, memo: dict[int, object]) -> CompiledKernel:
        return self

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
        name = self.SPEC.name
        if self.state.get("function") is not None:
            return f"{name} kernel ({self.SPEC.use}): built"
        problem = self.state.get("reason") or self.problem()
        if problem:
            return f"{name} kernel: not used ({problem}); {name} layers use torch's kernels"
        return f"{name} kernel ({self.SPEC.use}): ready (compiled once, at first use)"

    def problem(self) -> str | None:
        """Why the kernel cannot be built here (None: it can)."""
        if os.environ.get(self.SPEC.switch, "1") == "0":
            return f"{self.SPEC.switch}=0"
        machine = platform.machine().lower()
        if machine not in ("x86_64", "amd64") or not sys.platform.startswith("linux"):
            return f"built for Linux on x86-64 only (this is {sys.platform} {platform.machine()})"
        if not cpu_has(*self.SPEC.cpu_flags):
            return "the CPU has no " + " and ".join(f.upper() for f in self.SPEC.cpu_flags)
        if compiler() is None:
            return "no C++ compiler (install g++, or set CXX)"
        return None

    def load(self) -> tuple[object | None, str | None]:
        """(the ctypes function, None), or (None, why not)."""
        problem = self.problem()
        command = compiler()
        if problem is not None or command is None:
            return None, problem
        source = self.SPEC.source
        try:
            library = ctypes.CDLL(str(build(self.SPEC, command)))
        except subprocess.CalledProcessError as error:
            return None, f"{Path(command).name} failed on {source.name}: {error.stderr[-400:]}"
        except OSError as error:
            return None, f"building or loading {source.name} failed: {error}"
        function = getattr(library, f"dynaspec_{self.SPEC.name}_{self.SPEC.entry}")
        function.argtypes = list(self.SPEC.argtypes)
        function.restype = None
        return function, None

    def runnable(self) -> ctypes._CFuncPtr:  # type: ignore[name-defined]
        """The C function, or a RuntimeError saying why it does not run here."""
        function = self.function()
        if function is None:
            reason = self.unavailable_reason()
            raise RuntimeError(f"the {self.SPEC.name} kernel is not available: {reason}")
        return function


class MatmulKernel(CompiledKernel):
    """A quantized linear layer's product on the kernel, y = x @ w.T + bias, (M, N): the
    `--quantize` mode it serves, for layers of which dtypes, and the widths it takes."""

    MODE: ClassVar[str]  # the --quantize mode whose layers it computes ("int8", ...)
    DTYPES: ClassVar[tuple[torch.dtype, ...]]  # the layers' dtypes it serves in that mode
    ROWS: ClassVar[int]  # output rows a tile of its layout (the output width's multiple)
    WIDTH: ClassVar[int]  # the input width's multiple
    INPUT: ClassVar[torch.dtype]  # the dtype its C function reads the rows in
    BYTES_PER_WEIGHT: ClassVar[float]  # what its layout holds a weight in (the memory check)

    def supports(self, out_features: int, in_features: int) -> bool:
        """Whether a layer of these widths can use the kernel (builds it at the first call)."""
        return out_features % self.ROWS == 0 and in_features % self.WIDTH == 0 and self.available()

    def product(
        self,
        rows: torch.Tensor,
        operands: tuple[torch.Tensor | None, ...],
        num_out: int,
        out_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """(M, N) `out_dtype` (float32, or bf16 where the kernel writes it) from a C function
        that takes (x, T, K, *operands, N, y, threads[, bf16]); `rows` (M, K) contiguous in
        its dtype."""
        function = self.runnable()
        bf16 = out_dtype == torch.bfloat16
        if bf16 and not self.SPEC.bf16_out:
            raise ValueError(f"the {self.SPEC.name} kernel writes float32 only, not {out_dtype}")
        out = torch.empty(rows.shape[0], num_out, dtype=out_dtype)
        pointers = [None if t is None else t.data_ptr() for t in operands]
        extra = (int(bf16),) if self.SPEC.bf16_out else ()
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


class ScaledKernel(MatmulKernel):
    """int8 codes q with one scale a row: y = (x @ q.T) * scale + bias, the codes in tiles of
    ROWS rows interleaved by COLUMNS columns, so that one tile is one sequential stream."""

    COLUMNS: ClassVar[int]  # columns a tile interleaves
    BYTES_PER_WEIGHT = 1.0  # an int8 code (the float32 scale a row is noise)

    def tiled(self, codes: torch.Tensor) -> torch.Tensor:
        """(N, K) int8 codes in the kernel's layout, (N/ROWS, K/COLUMNS, ROWS, COLUMNS)."""
        rows, columns = codes.shape
        tiles = codes.view(rows // self.ROWS, self.ROWS, columns // self.COLUMNS, self.COLUMNS)
        return tiles.permute(0, 2, 1, 3).contiguous()

    def untiled(self, tiled_codes: torch.Tensor) -> torch.Tensor:
        """The (N, K) codes back from `tiled(codes)`."""
        tiles, blocks, _, _ = tiled_codes.shape
        return tiled_codes.permute(0, 2, 1, 3).reshape(tiles * self.ROWS, blocks * self.COLUMNS)

    @torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
    def matmul(
        self,
        rows: torch.Tensor,
        codes: torch.Tensor,
        scale: torch.Tensor,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """(rows (M, K) @ q.T) * scale (N,) + bias (N,): (M, N) `out_dtype`, where `codes` is
        `tiled(q)` for the int8 codes q (N, K) and `scale`, `bias` are float32."""
        rows = rows.to(self.INPUT).contiguous()
        return self.product(rows, (codes, scale, bias), codes.shape[0] * self.ROWS, out_dtype)


class PackedKernel(MatmulKernel):
    """4-bit codes (int4_codes.py: w = q * s + m per row and group of GROUP columns) in the
    kernel's own layout (`packed`), tiles of ROWS rows."""

    GROUP: ClassVar[int] = 32  # weight columns a scale and offset cover (q4_K's sub-blocks)
    BYTES_PER_WEIGHT = 0.625  # a 4-bit code, and float16 s and m a group of 32
    PACK_ROWS: ClassVar[int] = 64 * 64  # rows packed at a time: whole tiles (bounds temporaries)

    def packed(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """The kernel's layout (`pack_tiles`) of the codes (N, K), scales and offsets
        (N, K/GROUP), built PACK_ROWS rows at a time."""
        parts = [
            self.pack_tiles(
                *(part[first : first + self.PACK_ROWS] for part in (codes, scale, offset))
            )
            for first in range(0, codes.shape[0], self.PACK_ROWS)
        ]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def pack_tiles(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """`packed` for a few whole tiles of rows: the kernel's own layout."""
        raise NotImplementedError

    def dequantize(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor
    ) -> torch.Tensor:
        """The float32 weights the kernel multiplies by: q * s + m."""
        return int4_codes.dequantize(codes, scale, offset)

    @torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
    def matmul(
        self,
        rows: torch.Tensor,
        codes: torch.Tensor,
        group: int,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """rows (M, K) @ w.T + bias (N,) float32: (M, N) `out_dtype`, where `codes` is
        `packed(...)` of the weights w (N, K) in groups of `group` (GROUP) columns."""
        if group != self.GROUP:
            raise ValueError(
                f"the {self.SPEC.name} kernel takes groups of {self.GROUP} columns, got {group}"
            )
        return self.packed_product(rows.to(self.INPUT).contiguous(), codes, bias, out_dtype)

    def packed_product(
        self,
        rows: torch.Tensor,
        packed: torch.Tensor,
        bias: torch.Tensor | None,
        out_dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """`matmul` for rows already contiguous in INPUT, from a C function that takes (x, T,
        K, packed, bias, N, y, threads, bf16)."""
        return self.product(rows, (packed, bias), packed.shape[0] * self.ROWS, out_dtype)
