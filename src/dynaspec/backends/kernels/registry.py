"""Every compiled kernel, by name: the one list that `dynaspec models`, the quantizer, the
memory check (`weight_bytes`) and the CLI read. A new kernel is a file in this folder (a
subclass of `base.CompiledKernel`, or of `base.ScaledKernel` / `base.PackedKernel` for a
quantized matmul, with its `SPEC`) and one line below; a matmul kernel then serves the
layers of its `MODE` and `DTYPES`."""

from __future__ import annotations

import torch

from dynaspec.backends.kernels import attention, bf16, int8, int8_bf16, w4a8, w8a8
from dynaspec.backends.kernels.base import CompiledKernel, MatmulKernel

# In the order `dynaspec models` lists them; for a mode and dtype, the first that serves it.
KERNELS: dict[str, CompiledKernel] = {
    kernel.SPEC.name: kernel
    for kernel in (
        int8.KERNEL,
        int8_bf16.KERNEL,
        w8a8.KERNEL,
        w4a8.KERNEL,
        attention.KERNEL,
        bf16.KERNEL,
    )
}


def matmul_kernel(mode: str, dtype: torch.dtype) -> MatmulKernel | None:
    """The kernel that computes `--quantize mode` layers of `dtype`, or None (torch's)."""
    for kernel in KERNELS.values():
        if isinstance(kernel, MatmulKernel) and mode == kernel.MODE and dtype in kernel.DTYPES:
            return kernel
    return None


def weight_bytes(mode: str, dtype: torch.dtype) -> float | None:
    """Bytes a weight of `mode` layers of `dtype` take on their kernel where nothing keeps it
    from running here (checked without building it), else None (torch's kernels)."""
    kernel = matmul_kernel(mode, dtype)
    if kernel is None or kernel.problem() is not None:
        return None
    return kernel.BYTES_PER_WEIGHT
