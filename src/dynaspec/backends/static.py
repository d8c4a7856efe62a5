"""The fast model adapter: a preallocated KV cache, compiled forwards, quantized weights.

`StaticAdapter` runs a `StaticDecoder` (dynaspec.backends.decoder) over caches allocated
once per sequence, at `begin()`, for the final length the loop announces (prompt +
max_new_tokens) plus room for padding. A position counter says how many slots hold
committed tokens; rolling back moves it (`crop`), so nothing is ever reallocated or copied.
Stale slots past the counter are overwritten by the next forward before anything attends to
them: a token at slot p attends to slots <= p only.

Shapes are bounded so that torch.compile compiles once: with `compile`, a forward over
n <= max(buckets) tokens is padded to the next bucket (1, 2, 4, 8, 16, 32 by default). The
padding tokens go to the slots right after the real ones, where the real tokens cannot see
them (they come later) and the next forward overwrites them. Longer forwards (a prefill, a
long catch-up) run uncompiled at their exact length, and so does every forward uncompiled.

What is compiled (`FastConfig.compile_scope`): "layer" compiles one decoder layer and runs
that graph for every layer, so compiling costs one layer per bucket; "model" compiles the
whole stack per bucket (longer to compile, fewer calls per forward). Compile time is kept
apart in `compile_time_s` (the first call of each bucket) and `warmup()` pays it up front.
torch keeps compiled kernels in its on-disk caches (inductor's FX graph cache), so a second
process compiles faster.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any

import torch

from dynaspec.backends import token_step
from dynaspec.backends.decoder import Prefill, StaticDecoder, check_supported, run_block
from dynaspec.backends.gemm_rows import padded
from dynaspec.backends.graphs import GraphForwards, bucket_for
from dynaspec.backends.quant import QUANTIZE_MODES, storage_of
from dynaspec.core.sharing import holding
from dynaspec.errors import ConfigError

COMPILE_SCOPES = ("layer", "model")

# Cache lengths are rounded up to a multiple of this, so that compiled shapes repeat.
CAPACITY_STEP = 256

# Slots attended by an uncompiled forward are rounded up to this.
ATTEND_STEP = 64

# Graphs one compiled function may hold: every bucket, with room for two cache lengths.
_RECOMPILE_LIMIT = 32


@dataclass(frozen=True)
class FastConfig:
    """How a model is made fast: static cache always; compile and quantize optional."""

    compile: bool = False  # compile the forwards with torch.compile
    quantize: str | None = None  # None, "int8" (weights), "w8a8"/"w4a8" (+ activations)
    compile_scope: str = "layer"  # "layer" (one graph for every layer) or "model" (the stack)
    buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # padded forward lengths that compile
    prepack: bool = False  # bf16/float32 on CPU: weights prepacked for oneDNN (a copy of each)
    pad_to_buckets: bool | None = None  # pad forwards to a bucket (None: when compiled)
    dense_batches: bool = True  # int8: codes also kept dense for verification (+2 B/weight)
    # w4a8: every layer in 4 bits, also those finer than 4 bits (quant.INT4_TOLERANCE),
    # which a target keeps in int8 to stay close to its own model. A draft's precision only
    # changes how often its tokens are accepted, and 4 bits cut what a draft step reads.
    int4_everywhere: bool = False
    # CUDA: each bucket's forward captured as a CUDA graph and replayed (backends/graphs.py;
    # forwards padded to the buckets, attention over the whole cache); elsewhere the same
    # padding and shapes without a capture
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        if self.quantize is not None and self.quantize not in QUANTIZE_MODES:
            raise ConfigError(
                f"unknown quantize {self.quantize!r}: use one of {QUANTIZE_MODES}, or None"
            )
        if self.compile_scope not in COMPILE_SCOPES:
            raise ConfigError(
                f"unknown compile_scope {self.compile_scope!r}: use one of {COMPILE_SCOPES}"
            )
        if not self.buckets or sorted(set(self.buckets)) != list(self.buckets):
            raise ConfigError(f"buckets must be increasing, got {self.buckets}")
        if self.buckets[0] < 1:
            raise ConfigError(f"buckets must be >= 1, got {self.buckets}")
        if self.compile and self.cuda_graphs:
            raise ConfigError("compile and cuda_graphs are two ways to one end: choose one")

    @property
    def padded(self) -> bool:
        """Whether forwards up to the largest bucket are padded to a bucket."""
        if self.pad_to_buckets is not None:
            return self.pad_to_buckets
        return self.compile or self.cuda_graphs

    @property
    def fixed_shapes(self) -> bool:
        """Whether every bucketed forward attends over the whole cache (one shape)."""
        return self.compile or self.cuda_graphs


def _compile(function: Any) -> Any:
    """torch.compile with static shapes (one graph per bucket)."""
    with warnings.catch_warnings():
        # torch's compiler imports torch.utils.mkldnn, which warns that torch.jit is deprecated.
        warnings.filterwarnings("ignore", "`torch.jit.script_method`", DeprecationWarning)
        return torch.compile(function, dynamic=False)


def _nbytes(tensor: torch.Tensor) -> int:
    """Bytes a tensor holds (a oneDNN-prepacked weight reports its logical size)."""
    if tensor.layout == torch._mkldnn:  # type: ignore[attr-defined]
        return tensor.numel() * tensor.element_size()
    return tensor.untyped_storage().nbytes()


def round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def causal_mask(positions: torch.Tensor, used: int, capacity: int) -> torch.Tensor:
    """(..., n, A) bool: may the token at each of `positions` (..., n) attend to slot j. A
    covers the `used` slots rounded up to ATTEND_STEP (so attention's shapes repeat), at
    most `capacity`."""
    attend = min(round_up(used, ATTEND_STEP), capacity)
    return torch.arange(attend, device=positions.device) <= positions[..., None]


def _config_int(config: Any, name: str) -> int | None:
    value = getattr(config, name, None)
    return value if isinstance(value, int) else None


class StaticAdapter:
    """`ModelAdapter` over a static KV cache; exposes the model's config and generation config."""

    is_encoder_decoder = False

    def __init__(
        self,
        model: Any,
        config: FastConfig | None = None,
        *,
        release: bool = False,
        progress: str | None = None,
    ) -> None:
        """`release`: free each of `model`'s linear weights once its copy is made (the
        caller owns `model` and drops it: the peak then holds one layer twice, not all);
        `progress`: a label for a bar over the layers while their copies are built."""
        self.fast = config or FastConfig()
        self.decoder = StaticDecoder(
            model,
            self.fast.quantize,
            dense_batches=self.fast.dense_batches,
            prepack=self.fast.prepack,
            release=release,
            progress=progress,
            int4_everywhere=self.fast.int4_everywhere,
        )
        self.config = model.config  # read-only: generate and the CLI read it (EOS, kind)
        self.generation_config = getattr(model, "generation_config", None)
        self.name = type(model).__name__
        self.vocab_size = _config_int(model.config, "vocab_size") or 0
        self.max_length = _config_int(model.config, "max_position_embeddings")
        self.device = self.decoder.device
        self.dtype = self.decoder.dtype  # activations, logits and the KV cache
        self.num_cached = 0
        self._prompt_end = 0  # slots of the prompt but its last token: its prefill
        self.compile_time_s = 0.0  # seconds spent compiling so far (first call per bucket)
        self._cache: list[torch.Tensor] = []
        self._capacity = 0
        self._cos = self._sin = torch.empty(0)
        self._compiled_buckets: set[tuple[int, int]] = set()
        self._hidden = self.decoder.hidden  # what runs a bucketed forward
        # A w4a8 draft's one-token forwards: fewer calls, rounding of their own
        drafts = self.fast.quantize == "w4a8" and self.fast.int4_everywhere
        self._step = token_step.build(self.decoder) if drafts and not self.fast.compile else None
        self._graphs = GraphForwards(self._graph_forward, self.device, self.fast.cuda_graphs)
        if self.fast.compile:
            if self.fast.compile_scope == "model":
                self._hidden = _compile(self.decoder.hidden)
            else:
                self._hidden = partial(self.decoder.hidden, block_fn=_compile(run_block))

    def __repr__(self) -> str:
        return (
            f"StaticAdapter({self.name}, quantize={self.fast.quantize}, "
            f"compile={self.fast.compile}, scope={self.fast.compile_scope})"
        )

    def fork(self) -> StaticAdapter:
        """A second adapter over the same weights and compiled forwards, with its own cache
        (the model as its own draft: `generate(fast, fast, ...)`)."""
        twin = copy.copy(self)
        twin.num_cached = 0
        twin._cache, twin._capacity = [], 0
        twin._cos = twin._sin = torch.empty(0)
        twin._compiled_buckets = set(self._compiled_buckets)
        twin._graphs = self._graphs.fork(twin._graph_forward)
        return twin

    @property
    def verify_buckets(self) -> tuple[int, ...]:
        """The widths forwards are padded to (a forward's cost is its bucket's), or ()."""
        return self.fast.buckets if self.fast.padded else ()

    def weight_bytes(self) -> int:
        """Bytes of the weights this adapter runs (shared or its own; the cache excluded),
        each storage once (a draft's joined q/k/v weights are one storage, three views)."""
        seen: set[int] = set()
        total = 0
        for tensor in [*self.decoder.parameters(), *self.decoder.buffers()]:
            # its storage (views share one), or the tensor itself where it has none to
            # read (oneDNN-prepacked): both addresses of live allocations, never equal
            key = storage_of(tensor)
            key = id(tensor) if key is None else key
            if key not in seen:
                seen.add(key)
                total += _nbytes(tensor)
        return total

    @property
    def capacity(self) -> int:
        """Slots in the cache (the final length plus padding room, rounded up)."""
        return self._capacity

    def begin(self, input_ids: torch.Tensor, max_length: int | None = None) -> torch.Tensor:
        """Reset the position; make sure the cache holds `max_length` tokens (default: the
        prompt + 256, grown by reallocating when exceeded)."""
        self.num_cached = 0
        self._prompt_end = input_ids.shape[1] - 1
        needed = max_length if max_length is not None else input_ids.shape[1] + CAPACITY_STEP
        self._reserve(needed)
        return input_ids[0].to(self.device)

    def _reserve(self, num_tokens: int) -> None:
        """Allocate (or grow) the cache to hold `num_tokens` plus the largest padding."""
        needed = num_tokens + self.fast.buckets[-1]
        if needed <= self._capacity:
            return
        capacity = round_up(needed, CAPACITY_STEP)
        old, old_len = self._cache, self._capacity
        with torch.inference_mode():
            self._cache = self.decoder.new_cache(capacity)
            for new, kept in zip(self._cache, old, strict=False):
                new[:, :, :old_len] = kept
            self._cos, self._sin = self.decoder.rope_tables(capacity)
        self._capacity = capacity

    @torch.inference_mode()
    def forward(self, new_tokens: torch.Tensor, num_logits: int) -> torch.Tensor:
        """Append (n,) tokens; return logits (num_logits, V) of the last ones."""
        n = new_tokens.numel()
        start = self.num_cached
        # Compiled: pad to a bucket (bounded shapes). Eager: any length runs as it is.
        bucket = bucket_for(n, self.fast.buckets) if self.fast.padded else n
        self._reserve(start + bucket)
        # (1, b): padded with copies of the last token, whose slots are never attended
        ids = padded(new_tokens.to(self.device), bucket).view(1, bucket)
        positions = torch.arange(start, start + bucket, device=self.device)[None]  # (1, b)
        # Slots attended: all of them when compiled (one shape), else only those in use.
        used = self._capacity if self.fast.fixed_shapes else start + bucket
        mask = causal_mask(positions, used, self._capacity)  # (1, b, A)
        if bucket == 1 and self._step is not None:
            hidden = self._step(ids[0], start, self._cos, self._sin, self._cache, mask)
        elif self.bit_exact:
            prefill = self._prefill(start, n)
            args = (ids, positions, mask, self._cos, self._sin, self._cache)
            hidden = self.decoder.hidden(*args, prefill=prefill)[0]  # (b, H)
        else:
            hidden = self._run(bucket, n, ids, positions, mask)[0]  # (b, H)
        self.num_cached = start + n
        return self.decoder.lm_head(hidden[n - num_logits : n])  # (num_logits, V)

    @property
    def bit_exact(self) -> bool:
        """Whether a fed token's logits are bitwise the same whatever else the forward feeds
        (bf16, uncompiled: every linear layer on a row-invariant kernel, attention on
        kernels/attention.py past the prompt's prefill; docs/design/fast-path.md)."""
        exact_path = not self.fast.compile and self._step is None
        return exact_path and self.dtype == torch.bfloat16 and self.decoder.row_invariant

    def _prefill(self, start: int, n: int) -> Prefill:
        """Which of the n tokens fed from slot `start` are the prompt's prefill."""
        return Prefill(min(max(self._prompt_end - start, 0), n), start)

    def _run(
        self, bucket: int, n: int, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        args = (ids, positions, mask, self._cos, self._sin, self._cache)
        if self.fast.cuda_graphs and bucket <= self.fast.buckets[-1]:
            generation = (self._capacity, self._cache[0].data_ptr())  # what the graph reads
            return self._graphs((bucket,), generation, ids, positions, mask)
        if not self.fast.compile or bucket > self.fast.buckets[-1]:
            return self.decoder.hidden(*args)
        key = (bucket, self._capacity)
        if key in self._compiled_buckets:
            return self._hidden(*args)
        started = perf_counter()  # the first call of a shape compiles it
        with torch._dynamo.config.patch(recompile_limit=_RECOMPILE_LIMIT):
            hidden = self._hidden(*args)
        self.compile_time_s += perf_counter() - started
        self._compiled_buckets.add(key)
        return hidden

    def _graph_forward(
        self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """The forward a CUDA graph records: the current cache and rotary tables."""
        return self.decoder.hidden(ids, positions, mask, self._cos, self._sin, self._cache)

    def crop(self, num_tokens: int) -> None:
        """Roll back to the first `num_tokens` tokens: only the position moves."""
        self.num_cached = max(0, min(self.num_cached, num_tokens))

    def warmup(self, max_length: int) -> float:
        """Compile (or capture as CUDA graphs) every bucket for sequences up to `max_length`
        now; returns compile seconds."""
        before = self.compile_time_s
        with holding(self):  # not while a generate call decodes with this adapter
            self._reserve(max_length)
            if self.fast.fixed_shapes:  # compiles, or captures the graphs
                for bucket in self.fast.buckets:
                    self.num_cached = 0
                    self.forward(torch.zeros(bucket, dtype=torch.long), 1)
            self.num_cached = 0
        return self.compile_time_s - before


def make_fast(
    model: Any,
    *,
    static: bool = False,
    compile: bool = False,
    quantize: str | None = None,
    draft: bool = False,
    release: bool = False,
    progress: str | None = None,
    graphs: bool = False,
) -> Any:
    """`model` itself when no option is set, else a `StaticAdapter` that owns its weights.

    static: a static KV cache with bf16 weights on dynaspec's row-invariant kernel (bit-exact:
    docs/design/fast-path.md) or, where it does not run, float32 or bf16 weights prepacked for
    oneDNN (on CPU the fastest unquantized path measured); compile: torch.compile the
    forwards (the model's own bf16 weights: prepacked ones do not trace); quantize: "int8",
    "w8a8" or "w4a8".
    `draft`: the model only drafts, so int8 keeps no dense codes for verification (they cost
    2 bytes a weight) and w4a8 puts every layer in 4 bits (`FastConfig.int4_everywhere`).
    The adapter keeps no reference to `model` itself, only to the parts it runs, so that
    prepacked or quantized weights replace the originals once the caller drops `model`.
    `release`: the caller owns `model` and will not run it again, so each original linear
    weight is freed as soon as its copy exists (the loaders: the peak holds one layer twice,
    not the whole model). `progress`: a label for a progress bar (stderr) over the layers
    while their copies are built (the loaders: half a minute for a 1.5B model).
    `graphs`: on CUDA, capture each bucket's forward as a CUDA graph (backends/graphs.py).
    """
    if not (static or compile or quantize or graphs):
        return model
    check_supported(model, _option_names(static, compile, quantize, draft))
    config = FastConfig(
        compile=compile,
        quantize=quantize,
        prepack=not compile,
        cuda_graphs=graphs,
        **role_fields(draft),
    )
    return StaticAdapter(model, config, release=release, progress=progress)


def role_fields(draft: bool) -> dict[str, bool]:
    """The FastConfig fields in which a model that only drafts differs from a target: it
    never verifies, so int8 keeps no dense codes, and its precision never changes the
    output, so w4a8 puts every layer in 4 bits."""
    return {"dense_batches": not draft, "int4_everywhere": draft}


def _option_names(
    static: bool, compile: bool, quantize: str | None, draft: bool
) -> tuple[str, str]:
    """The fast-path options passed, in Python's words and in the CLI's."""
    quantize_name = "draft_quantize" if draft else "quantize"
    python = [f"{name}=True" for name, on in (("static", static), ("compile", compile)) if on]
    cli = [f"--{name}" for name, on in (("static", static), ("compile", compile)) if on]
    if quantize:
        python.append(f"{quantize_name}={quantize!r}")
        cli.append(f"--{quantize_name.replace('_', '-')} {quantize}")
    return " and ".join(python), " and ".join(cli)
