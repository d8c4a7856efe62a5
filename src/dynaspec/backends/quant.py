"""Quantized linear layers (int8 weights; w8a8 and w4a8: 8- and 4-bit weights with 8-bit
activations) built from a model's `nn.Linear`.

Quantizing the weights to 8 bits keeps activations in the model's dtype, so a forward reads
about half the bytes a bf16 forward reads. A decoding step
with one token is bound by reading the weights, which is why it speeds up; a forward over
many tokens is bound by arithmetic, which the quantized kernels do not speed up.

Kernels: dynaspec's own (backends/kernels/), else torch's `torch._weight_int8pack_mm` (int8
weights, one scale per output row); oneDNN's prepacked bf16 matmul for dense weights. int4
weights with float activations left (slower than int8 on an AVX2 CPU and than w4a8/w8a8 on
an AVX512-BF16 one: benchmarks/HISTORY.md); the table below keeps torch's int4 kernel's row
for comparison.

Measured on one 1536 x 8960 layer (the MLP of Qwen2.5-Coder-1.5B), 2-core AMD EPYC (Zen 4,
AVX512-BF16), torch 2.13, microseconds per call for M tokens. The machine was shared with
other jobs: best of several runs; the first table on a nearly idle machine, 2 threads; the
second under load, 1 thread, CPU time of the process.

    M                      1      2      4      8     16
    bf16 (F.linear)     1156   1024   1279   1837   2446
    int8 (int8pack)      472    539    787   1802   3702
    int4 (int4pack)      358    449    733   1582   2967   (groups of 128)
    int8 -> bf16 + bf16 2539   2453   2583   5228   3597   (converted on every call)

    M (loaded, 1 thread)   1      2      4      8     16
    bf16 (F.linear)     2739   2420   2583   3154   4217
    bf16 prepacked      2166   2206   1716   2330   3110   (bitwise the same as F.linear)
    int8 (int8pack)     1609   1802   2317   4763   9141

One token in int8 costs 0.4-0.6 of bf16, but the int8 kernel does not batch: 8 tokens cost
3-3.8 single steps, 16 tokens 6-8 (bf16: 1.2-1.6 and 1.5-2.1). Converting the weight on
every call costs more than the bf16 matmul itself. Hence the int8 verification path: the
codes q are also kept as a bf16 matrix (integers up to 127 are exact in bf16, and
x @ q.T * scale is what int8pack computes, up to the summation order), prepacked, and any
forward over more than DENSE_THRESHOLD tokens runs the dense kernel over them: measured on
the whole 1.5B target (loaded, 1 thread), 8 tokens cost 1.46 int8 steps instead of 1.99.
The price is 2 more bytes per weight, so a draft (which never verifies) keeps none and
converts per call for its rare long forwards (a prefill, a catch-up).

bf16 on a CPU with AVX512-BF16: int8 layers run on dynaspec's own kernel
(backends/kernels/int8_bf16.py), which batches, and keep no bf16 codes. The whole 1.5B target
(static adapter, 200 tokens cached, same machine, nearly idle, 2 threads), milliseconds per
forward of N tokens, median of 5:

    N                                   1     2     4     6     8    12    16
    bf16 prepacked                    169   173   147   142   167   179   201
    int8, int8pack + bf16 codes       133   152   184   160   195   227   253   (10.1 GB peak)
    int8, dynaspec's bf16 kernel       69    77    99   142   167   188   243   (7.2 GB peak)

(peaks: the process while loading and converting the bf16 model.)

float32 (an AVX2-only CPU, where dynaspec runs models in float32): int8 layers run on
dynaspec's own kernel there (backends/kernels/int8.py), which batches.
For dense weights, torch's F.linear (MKL) does not batch either; oneDNN's prepacked float32
matmul does. The same layer, 2-core AMD EPYC, AVX2 only, nearly idle, milliseconds per
call (noisy: +-20%):

    M                          1      2      4      8     16
    float32 (F.linear)       4.9   11.6   21.2   19.7   21.8
    float32 prepacked        4.1    4.7    5.6    7.2    8.6   (reordered for no batch size)

and the whole 1.5B target (static adapter, 200 tokens cached), seconds per forward of N
tokens: N = 1, 2, 4, 8, 16 cost 0.60, 1.14, 1.66, 1.76, 1.85 with F.linear and 0.59, 0.55,
0.63, 0.77, 0.93 prepacked: verifying 8 tokens costs 1.3 steps instead of 2.9.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dynaspec.backends import exact_linear, int4_cache
from dynaspec.backends.exact_linear import BitExactLinear
from dynaspec.backends.kernels.base import MatmulKernel
from dynaspec.backends.kernels.registry import matmul_kernel
from dynaspec.backends.pages import FileMapping, drop_pages
from dynaspec.errors import ConfigError

QUANTIZE_MODES = ("int8", "w8a8", "w4a8")

# Int8Linear: above this many tokens, the dense kernel (kept codes, or a per-call conversion).
DENSE_THRESHOLD = 4  # with codes kept as a dense matrix (a target's verification)
CONVERT_THRESHOLD = 16  # converting per call (a draft's prefill or catch-up)
QUANTIZE_ROWS = 4096  # rows quantized at a time (bounds the float32 copy)

# On a 4-bit kernel (w4a8), a target's layer whose 4-bit weights differ from its own by more
# than this (relative, in the Frobenius norm) is held in 8 bits instead: its weights are finer
# than 4 bits (a q6_K layer of a q4_K_M GGUF, its head), while those of a q4_K layer come back
# exactly (about 7e-4: float16 scales). Measured on Qwen2.5-Coder-1.5B (from its q4_K_M
# GGUF), top-1 agreement with the float32 model over 1,280 teacher-forced positions
# (quality.py of int4-kernel-avx2-2026-12-02, benchmarks/HISTORY.md): this rule (29 of 197 layers in
# int8) 0.993, int8 everywhere 0.988, llama.cpp on the GGUF itself 0.981; every layer in 4
# bits 0.940 (an earlier run, docs/design/fast-path.md).
INT4_TOLERANCE = 0.01


def can_prepack(weight: torch.Tensor) -> bool:
    """Whether oneDNN can hold `weight` prepacked: float32 on any CPU, bf16 on one whose
    oneDNN has a bf16 path (AVX512-BW/VL/DQ or AVX-NE-CONVERT; an AVX2-only CPU keeps a
    plain bf16 weight)."""
    if weight.device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return False
    if weight.dtype == torch.float32:
        return True
    return weight.dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()


def pack_hint(weight: torch.Tensor) -> int | None:
    """The batch-size hint the weight is reordered for: bf16 for one token (measured on the
    AVX512-BF16 EPYC); float32 for none, the layout whose every row of a many-token product
    is bitwise the one-token product (a verification sees the logits a step would)."""
    return 1 if weight.dtype == torch.bfloat16 else None


@torch.compiler.disable  # a prepacked (opaque oneDNN) weight cannot be traced
def _packed_linear(
    x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class DenseWeight(nn.Module):
    """A dense (N, K) weight, prepacked for oneDNN's matmul when `prepack` and possible.

    Prepacking reorders the weight once into the blocked layout the kernel reads, instead of
    on every call: measured 20-30% faster for one token on the layer above, same results.
    """

    def __init__(self, weight: torch.Tensor, prepack: bool) -> None:
        super().__init__()
        self.packed = prepack and can_prepack(weight)
        hint = pack_hint(weight)
        stored = torch.ops.mkldnn._reorder_linear_weight(weight, hint) if self.packed else weight
        self.register_buffer("weight", stored, persistent=False)
        self.out_features = weight.shape[0]

    def forward(self, rows: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """(M, K) -> (M, N)."""
        if self.packed:
            return _packed_linear(rows, self.weight, bias)
        return F.linear(rows, self.weight, bias)


class PackedLinear(nn.Module):
    """An unquantized linear layer over a `DenseWeight` copy of the original's weight."""

    def __init__(self, linear: nn.Linear, prepack: bool = True) -> None:
        super().__init__()
        self.dense = DenseWeight(linear.weight.detach(), prepack)
        bias = linear.bias
        self.register_buffer("bias", None if bias is None else bias.detach())
        self.in_features = linear.in_features
        self.out_features = linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.dense(x.reshape(-1, self.in_features), self.bias)
        return out.reshape(*x.shape[:-1], self.out_features)


def int8_codes(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes (N, K) int8, scale (N,) in the weight's dtype): symmetric per row, the largest
    |w| of a row maps to 127, the scale rounded to the weight's dtype first so that q * scale
    is what every kernel multiplies. Computed QUANTIZE_ROWS rows at a time: a float32 copy of
    a whole head (151,936 x 1,536) would take 0.9 GB for a moment."""
    codes = torch.empty(weight.shape, dtype=torch.int8)
    scale = torch.empty(weight.shape[0], dtype=weight.dtype)
    for first in range(0, weight.shape[0], QUANTIZE_ROWS):
        rows = slice(first, first + QUANTIZE_ROWS)
        chunk = weight[rows].to(torch.float32, copy=True)  # one copy, then in place
        chunk_scale = (chunk.abs().amax(dim=1) / 127.0).clamp_min(1e-12).to(weight.dtype)
        chunk.div_(chunk_scale.float()[:, None]).round_().clamp_(-127, 127)
        codes[rows], scale[rows] = chunk, chunk_scale
    return codes, scale


class Int8Linear(nn.Module):
    """y = (x @ q.T) * scale + bias, q int8 per output row, scale in the input dtype.

    One token (up to the threshold): `torch._weight_int8pack_mm`. More tokens: x @ q.T in the
    dense kernel over q held as a bf16 matrix (integers up to 127 are exact in bf16, so the
    product is the same up to the summation order), kept (`dense_batches`: 2 more bytes per
    weight, for a target's verification) or converted per call (a draft's prefill).
    """

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        dense_batches: bool = False,
        prepack: bool = False,
        kernel: MatmulKernel | None = None,
    ) -> None:
        super().__init__()
        compute_dtype = weight.dtype
        codes, scale = int8_codes(weight)
        # dynaspec's own kernels, which batch, so no dense codes are kept: float32 on a CPU
        # with AVX2 (backends/kernels/int8.py), bf16 on one with AVX512-BF16
        # (backends/kernels/int8_bf16.py); each holds its codes in its own tiled layout and
        # its scale and bias in float32.
        # `kernel` given: that one (w8a8 quantizes the activations too).
        self.kernel = kernel or _fitting("int8", compute_dtype, *weight.shape)
        keep = dense_batches and not self.kernel
        self.codes = DenseWeight(codes.to(compute_dtype), prepack) if keep else None
        codes = self.kernel.tiled(codes) if self.kernel else codes
        if self.kernel:
            scale = scale.float()
            bias = None if bias is None else bias.float()
        self.register_buffer("weight", codes)  # (N, K), or tiled for the kernel
        self.register_buffer("scale", scale.contiguous())  # (N,)
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self.threshold = DENSE_THRESHOLD if dense_batches else CONVERT_THRESHOLD
        self.in_features = weight.shape[1]
        self.out_features = weight.shape[0]

    def int8_codes(self) -> torch.Tensor:
        """The (N, K) int8 codes, whichever layout the kernel holds them in."""
        return self.kernel.untiled(self.weight) if self.kernel else self.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (M, K)
        if self.kernel:
            out = self.kernel.matmul(
                rows, self.weight, self.scale, self.bias, **_out(self.kernel, x)
            )
            return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)
        if rows.shape[0] <= self.threshold:
            out = torch._weight_int8pack_mm(rows, self.weight, self.scale)  # (M, N)
        elif self.codes is not None:
            out = self.codes(rows) * self.scale
        else:
            out = F.linear(rows, self.weight.to(rows.dtype)) * self.scale
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)


class Int4Linear(nn.Module):
    """y = x @ w.T + bias for 4-bit weights w in groups of input columns, on a 4-bit kernel
    (w4a8: backends/kernels/w4a8.py, which quantizes the activations to 8 bits too): w = q * s
    + m, q in [0, 15], s and m float16 per group of the kernel's GROUP columns; `error`: how
    far (relative) the 4-bit weights are from the layer's own (`quantize_linear` keeps a
    target's layer in 8 bits above INT4_TOLERANCE)."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, kernel: MatmulKernel
    ) -> None:
        super().__init__()
        out_features, in_features = weight.shape
        self.in_features = in_features
        self.out_features = out_features
        self.kernel = kernel
        self.group_size = kernel.GROUP
        packed, self.error = int4_cache.packed_layer(weight, self.group_size, kernel)
        self.register_buffer("weight", packed)
        float_bias = None if bias is None else bias.detach().to(torch.float32, copy=True)
        self.register_buffer("bias", float_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features)  # (M, K)
        out = self.kernel.matmul(
            rows, self.weight, self.group_size, self.bias, **_out(self.kernel, x)
        )
        return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def quantize_linear(
    linear: nn.Linear,
    mode: str | None,
    *,
    dense_batches: bool = False,
    prepack: bool = False,
    int4_everywhere: bool = False,
) -> nn.Module:
    """A layer computing `linear` from new weights (the original is never changed).

    mode None: `linear` itself, or with `prepack` a copy: bf16 on dynaspec's row-invariant
    kernel where it runs (backends/exact_linear.py), else prepacked for oneDNN. "int8": a
    quantized copy; `dense_batches` keeps int8 codes for forwards over many tokens.
    "w8a8": the int8 codes, with activations quantized per token and group on the int8 x
    int8 kernel (backends/kernels/w8a8.py; a model whose outputs are its own). "w4a8": the
    int4 codes on the 4-bit x int8 kernel (backends/kernels/w4a8.py), layers finer than 4 bits
    as w8a8. `int4_everywhere`: w4a8 puts every layer in 4 bits, those finer too (a
    draft's: its precision changes how often its tokens are accepted, never the output).
    """
    if mode is None:
        if prepack and exact_linear.fits(linear):  # bf16: rows bitwise the same for any count
            return BitExactLinear(linear)
        return PackedLinear(linear) if prepack and can_prepack(linear.weight) else linear
    weight = linear.weight.detach()
    if weight.device.type != "cpu":
        raise ConfigError(
            f"quantize={mode!r} uses torch's CPU kernels; the model is on {weight.device}: "
            "load it on the CPU or pass quantize=None"
        )
    if mode == "int8":
        return Int8Linear(weight, linear.bias, dense_batches, prepack)
    if mode == "w8a8":
        return Int8Linear(weight, linear.bias, kernel=_integer_kernel("w8a8", weight))
    if mode == "w4a8":
        four = Int4Linear(weight, linear.bias, _integer_kernel("w4a8", weight))
        if four.error > INT4_TOLERANCE and not int4_everywhere:  # finer: int8, same activations
            return Int8Linear(weight, linear.bias, kernel=_integer_kernel("w8a8", weight))
        return four
    raise ConfigError(f"unknown quantize {mode!r}: use one of {QUANTIZE_MODES}, or None")


def row_invariant(layer: nn.Module) -> bool:
    """Whether a layer `quantize_linear` made computes each row bitwise the same whatever
    the number of rows it runs with: on one of dynaspec's kernels (the bf16 one, each int8
    and 4-bit one), whose sums run in a fixed order per row; not oneDNN's, MKL's or torch's
    int8 products, whose order may depend on the row count."""
    if isinstance(layer, BitExactLinear):
        return True
    return isinstance(layer, (Int8Linear, Int4Linear)) and layer.kernel is not None


def _fitting(
    mode: str, dtype: torch.dtype, out_features: int, in_features: int
) -> MatmulKernel | None:
    """dynaspec's kernel for `mode` layers of `dtype` where it runs and fits the layer (the
    registry's), else None: torch's kernels."""
    kernel = matmul_kernel(mode, dtype)
    return kernel if kernel is not None and kernel.supports(out_features, in_features) else None


def _out(kernel: MatmulKernel, x: torch.Tensor) -> dict[str, torch.dtype]:
    """The kernel writes bf16 for bf16 activations where it can (the same bits as converting
    its float32 afterwards, without that extra pass); otherwise float32, its default."""
    bf16 = x.dtype == torch.bfloat16 and kernel.SPEC.bf16_out
    return {"out_dtype": torch.bfloat16} if bf16 else {}


def _integer_kernel(mode: str, weight: torch.Tensor) -> MatmulKernel:
    """The kernel of `mode` (w8a8 or w4a8: int8 activations) for `weight`'s layer, or a
    ConfigError saying why it cannot serve it."""
    kernel = matmul_kernel(mode, weight.dtype)
    if kernel is None or not kernel.available():
        reason = "none serves this dtype" if kernel is None else kernel.unavailable_reason()
        raise ConfigError(
            f"quantize={mode!r} needs dynaspec's {mode} kernel, which does not run here: "
            f"{reason}; use quantize='int8' (weights only)"
        )
    out_features, in_features = weight.shape
    if not kernel.supports(out_features, in_features):
        raise ConfigError(
            f"quantize={mode!r} needs layer widths in multiples of 64 (out) and 128 (in); "
            f"this model has a {in_features} -> {out_features} layer: use quantize='int8'"
        )
    return kernel


def release_replaced(
    linear: nn.Linear, replacement: nn.Module, mappings: tuple[FileMapping, ...] = ()
) -> bool:
    """Frees `linear`'s weight when `replacement` holds its own copy (prepacked, quantized),
    so that a model converted layer by layer never holds both at once; the model `linear`
    belongs to can no longer run. A weight read from a model file mapped into memory (one
    of `mappings`, `pages.clean_file_mappings()`) also gives its pages back, which the
    mapping would otherwise keep (a tied embedding reads them again as it needs them).
    Whether it was freed."""
    if replacement is linear:
        return False
    original = storage_of(linear.weight)
    for tensor in (*replacement.parameters(), *replacement.buffers()):
        if tensor is not None and storage_of(tensor) == original:
            return False  # the replacement computes from the original itself
    drop_pages(linear.weight.detach(), mappings)
    linear.weight = nn.Parameter(linear.weight.new_empty(0), requires_grad=False)
    return True


def storage_of(tensor: torch.Tensor) -> int | None:
    """Where a tensor's data lives (None: an opaque layout, e.g. a oneDNN prepacked one)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
