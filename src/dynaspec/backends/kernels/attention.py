"""The static decoder's attention over bf16 caches in one C call (csrc/attention_bf16.cpp),
built once on AVX-512 CPUs.

`decoder.grouped_attention` spends about a dozen torch calls a layer and oneDNN's bf16
batched matmul, which costs several times its float32 one for one or a few queries (on the
2-core AVX512-BF16 EPYC: ~200 us a layer of Qwen2.5-Coder 1.5B over 256 slots, ~6 ms of a
~60 ms step). This kernel computes the same quantities (scores rounded to bf16, a float32
softmax rounded to bf16, float32 sums) in one pass over the slots; its results differ from
grouped_attention's by the order of float32 sums only, so a bf16 model's output may change
at a tie of its top two logits, as between any two bf16 kernels. float32 models keep
grouped_attention (their outputs equal transformers' own). Where the kernel cannot run (no
compiler, no AVX-512, not x86-64, or `DYNASPEC_ATTENTION_KERNEL=0`) grouped_attention runs.
"""

from __future__ import annotations

import ctypes
from typing import ClassVar

import torch

from dynaspec.backends.kernels.base import CompiledKernel
from dynaspec.backends.kernels.build import KernelSpec

_P, _I = ctypes.c_void_p, ctypes.c_int


class AttentionKernel(CompiledKernel):
    """Attention of a few queries over bf16 caches, heads merged, AVX-512."""

    SPEC: ClassVar[KernelSpec] = KernelSpec(
        name="attention",
        # q, B, heads, n, d, key cache, value cache, kv_heads, L, A, mask, scaling, out, threads
        argtypes=(_P, _I, _I, _I, _I, _P, _P, _I, _I, _I, _P, ctypes.c_float, _P, _I),
        cpu_flags=("avx512f",),
        use="the static decoder's attention in bf16",
        entry="bf16",
    )
    MAX_GROUPS = 16  # query heads a key/value head (csrc/attention_bf16.cpp)

    def supports(self, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> bool:
        """Whether attention of these shapes over caches of `dtype` can use the kernel (builds
        it at the first call)."""
        return self._computes(dtype, heads, kv_heads, head_dim) and self.available()

    def _computes(self, dtype: torch.dtype, heads: int, kv_heads: int, head_dim: int) -> bool:
        """Whether the kernel computes attention of these shapes over caches of `dtype`."""
        shaped = (
            head_dim % 16 == 0 and heads % kv_heads == 0 and heads // kv_heads <= self.MAX_GROUPS
        )
        return dtype == torch.bfloat16 and shaped

    @torch.compiler.disable  # an opaque C call: compiled graphs call it as it is
    def attend(
        self,
        query: torch.Tensor,  # (B, heads, n, d) bf16
        key_cache: torch.Tensor,  # (B, kv_heads, L, d) bf16, contiguous
        value_cache: torch.Tensor,  # (B, kv_heads, L, d) bf16, contiguous
        mask: torch.Tensor,  # (B, n, A) bool, A <= L: may token i attend to slot j
        scaling: float,
    ) -> torch.Tensor:
        """(B, n, heads * d) bf16: each token's attention output, heads merged (o_proj's input)."""
        function = self.runnable()
        rows, heads, n, dim = query.shape
        kv_heads, length = key_cache.shape[1], key_cache.shape[2]
        query, mask = query.contiguous(), mask.contiguous()
        if not (key_cache.is_contiguous() and value_cache.is_contiguous()):
            raise ValueError("the attention kernel reads contiguous caches")
        if not self._computes(key_cache.dtype, heads, kv_heads, dim) or mask.shape[-1] > length:
            raise ValueError(
                f"the attention kernel takes bf16 caches, d a multiple of 16 and at most "
                f"{self.MAX_GROUPS} query heads a key/value head, attending at most the cache's "
                f"{length} slots; got {key_cache.dtype}, d = {dim}, {heads} over {kv_heads} heads, "
                f"{mask.shape[-1]} slots"
            )
        out = torch.empty(rows, n, heads * dim, dtype=torch.bfloat16)
        function(
            query.data_ptr(),
            rows,
            heads,
            n,
            dim,
            key_cache.data_ptr(),
            value_cache.data_ptr(),
            kv_heads,
            length,
            mask.shape[-1],
            mask.data_ptr(),
            scaling,
            out.data_ptr(),
            torch.get_num_threads(),
        )
        return out


KERNEL = AttentionKernel()
