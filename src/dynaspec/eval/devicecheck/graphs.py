"""The graph variant of the device check: the static path with CUDA graphs
(`make_fast(model, graphs=True)`, backends/graphs.py) for the pairs whose models it runs
(Llama- and Qwen2-style; OPT has no static path and is skipped, saying so).

Per pair, with random weights of the real shapes:

- every bucket captured first (`warmup`, its seconds recorded apart);
- T(n) for n = 1..max_verify_tokens and the draft's one-token step through the graphs
  (`measure_costs`): T is a step function, T(n) = T(bucket of n); `bucket_s` lists T per
  bucket;
- dynaspec's per-round overhead on the graph path, in the shape `dynaspec project` reads: the
  target alone (one round per token) and the target drafting for itself with the constant
  schedule (a fork of the same adapter: every drafted token accepted up to bf16 ties), each
  as the slope of wall time over a short and a long call, minus the rounds' forwards as
  measured above;
- batches (`batch_costs`): a forward of B rows x n tokens for B = 1..32 and n = 1, 2, 4, 8,
  the target's and the draft's one-token forward, through the static batch adapter with its
  graphs (backends/batch_graphs.py: one per bucket of rows and of tokens, each captured at
  its first forward, which is not timed); and (`batch_runs`) whole batched decodes at
  B = 1, 4, 16, 32, the target alone against `adaptive` with the pair's draft, through the
  same graphs (a decode replays what the decodes before it captured; the untimed warm-up
  call captures the rest): with random weights the draft never agrees with the target, so
  this measures what the rule costs where drafting cannot pay (the issue's goal: never
  below 0.97x of the target alone).

On the CPU (`--dry-run`) the same code runs with the graphs' seam as an identity.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from functools import partial
from time import perf_counter
from typing import Any

import torch

from dynaspec.backends.static import make_fast
from dynaspec.backends.static_batch import StaticBatchAdapter
from dynaspec.core.timing import device_clock
from dynaspec.eval.cost_model import measure_costs
from dynaspec.eval.devicecheck.shapes import PairShape, build_model
from dynaspec.generation import generate

GRAPH_ARCHS = ("llama", "qwen2")  # what StaticDecoder runs
BATCH_SIZES = (1, 2, 4, 8, 16, 32)
BATCH_WIDTHS = (1, 2, 4, 8)  # tokens per row of a batched verification (k + 1)
OVERHEAD_TOKENS = (8, 40)  # new tokens of the short and the long call (dry run: halved)
OVERHEAD_LOOKAHEAD = 3  # k of the self-drafted calls: verifications of 4 tokens, a bucket


def graph_variant(
    pair: PairShape, prompt: torch.Tensor, settings: Any, progress: Any
) -> dict[str, Any]:
    """Costs, overheads and batch costs of `pair` on the graph path; or why skipped."""
    unsupported = [s.name for s in (pair.target, pair.draft) if s.arch not in GRAPH_ARCHS]
    if unsupported:
        return {"skipped": f"no static path for {', '.join(unsupported)} (Llama/Qwen2 only)"}
    device, dtype = torch.device(settings.device), getattr(torch, settings.dtype)
    progress.log(f"{pair.name}: graph variant (building, capturing every bucket)")
    target, draft = (
        make_fast(build_model(shape, device, dtype, seed), graphs=True)
        for seed, shape in enumerate((pair.target, pair.draft))
    )
    longest = prompt.shape[1] + CAPACITY_ROOM
    started = perf_counter()
    for adapter in (target, draft):
        adapter.warmup(longest)
    capture_s = perf_counter() - started
    progress.log(f"{pair.name}: captured in {capture_s:.1f} s; T(n), draft step, prefills")
    costs = measure_costs(
        target, draft, prompt, max_tokens=settings.max_verify_tokens, reps=settings.cost_reps
    )
    buckets = [b for b in target.verify_buckets if b <= settings.max_verify_tokens]
    result: dict[str, Any] = {
        "costs": costs.to_json(),
        "capture_s": capture_s,
        "captured_graphs": target._graphs.capture_count + draft._graphs.capture_count,
        "graphs_enabled": target._graphs.enabled,
        "buckets": buckets,
        "bucket_s": {str(b): costs.verify_s[b - 1] for b in buckets},
    }
    if progress.left() > 0:
        progress.log(f"{pair.name}: per-round overhead on the graph path")
        result["overhead"] = graph_overheads(target, prompt, costs, settings.device == "cpu")
    if progress.left() > 0:
        progress.log(f"{pair.name}: batches of {BATCH_SIZES[0]}-{BATCH_SIZES[-1]} rows")
        result["batch"] = batch_costs(target, draft, prompt, settings.cost_reps)
    if progress.left() > 0:
        progress.log(f"{pair.name}: batched decodes, alone and adaptive")
        dry_run = settings.device == "cpu"
        result["batch"]["runs"] = batch_runs(target, draft, prompt, dry_run)
    return result


# Slots beyond the prompt every measurement may use (T(32) twice over, the overhead calls).
CAPACITY_ROOM = 96


def _slope(
    call: Callable[[int], Any], device: torch.device, lengths: Sequence[int]
) -> tuple[float, float]:
    """(seconds per new token, seconds of the call at 0 tokens) of `call(new_tokens)`, from
    a warm-up and one timed call per length."""
    call(lengths[0])  # warm-up
    times = []
    for new_tokens in lengths:
        start = device_clock(device)
        call(new_tokens)
        times.append(device_clock(device) - start)
    per_token = (times[1] - times[0]) / (lengths[1] - lengths[0])
    return per_token, times[0] - per_token * lengths[0]


def graph_overheads(target: Any, prompt: torch.Tensor, costs: Any, dry_run: bool) -> dict[str, Any]:
    """dynaspec's per-round time outside the forwards, alone and self-drafted (module doc)."""
    lengths = tuple(n // 2 for n in OVERHEAD_TOKENS) if dry_run else OVERHEAD_TOKENS
    k = OVERHEAD_LOOKAHEAD
    twin = target.fork()  # the same weights and shapes, its own cache and graphs
    twin.warmup(prompt.shape[1] + CAPACITY_ROOM)  # captured before anything is timed

    def alone(new_tokens: int) -> Any:
        return generate(target, None, prompt, max_new_tokens=new_tokens, eos_token_id=[])

    def drafted(new_tokens: int) -> Any:
        return generate(
            target,
            twin,
            prompt,
            max_new_tokens=new_tokens,
            num_assistant_tokens=k,
            num_assistant_tokens_schedule="constant",
            eos_token_id=[],
        )

    step = costs.verify_s[0]
    alone_per_token, alone_setup = _slope(alone, target.device, lengths)
    round_forwards = k * costs.draft_token_s + costs.verify_time(k + 1)
    self_per_token, self_setup = _slope(drafted, target.device, lengths)
    self_per_round = self_per_token * (k + 1)  # every drafted token accepted: k + 1 a round
    return {
        "lookahead": k,
        "new_tokens": list(lengths),
        "method": "wall-time slope over a short and a long call, minus the forwards' T(n), "
        "c_d measured on the graph path (random weights: the self-draft accepts all)",
        "dynaspec_target_alone": {
            "per_round_s": max(alone_per_token - step, 0.0),
            "wall_per_token_s": alone_per_token,
            "setup_s": alone_setup,
        },
        "dynaspec": {
            "per_round_s": max(self_per_round - round_forwards, 0.0),
            "wall_per_round_s": self_per_round,
            "forwards_per_round_s": round_forwards,
            "setup_s": self_setup,
        },
    }


def _batch_forward_s(
    adapter: StaticBatchAdapter, rows: int, width: int, prompt: torch.Tensor, reps: int
) -> float:
    """Median seconds of a forward over `rows` rows of `width` tokens after the prompt."""
    ids = prompt.expand(rows, -1)
    adapter.begin(ids, torch.ones_like(ids))
    adapter.forward(list(ids), [1] * rows)
    cached = adapter.num_cached
    filler = [prompt[0, -width:]] * rows  # (width,) per row
    samples = []
    for rep in range(reps + 1):
        start = device_clock(adapter.device)
        adapter.forward(filler, [width] * rows)
        elapsed = device_clock(adapter.device) - start
        adapter.crop(cached)
        if rep:  # the first one warms up
            samples.append(elapsed)
    return statistics.median(samples)


def batch_costs(target: Any, draft: Any, prompt: torch.Tensor, reps: int) -> dict[str, Any]:
    """T_B(n) of the target for every batch size and width, D_B(1) of the draft (seconds)."""
    batched = StaticBatchAdapter(target)
    draft_batched = StaticBatchAdapter(draft)
    verify: dict[str, dict[str, float]] = {}
    draft_step: dict[str, float] = {}
    with torch.inference_mode():
        for rows in BATCH_SIZES:
            verify[str(rows)] = {
                str(width): _batch_forward_s(batched, rows, width, prompt, reps)
                for width in BATCH_WIDTHS
            }
            draft_step[str(rows)] = _batch_forward_s(draft_batched, rows, 1, prompt, reps)
            batched.begin(prompt[:, :1], torch.ones_like(prompt[:, :1]))  # frees the rows
            draft_batched.begin(prompt[:, :1], torch.ones_like(prompt[:, :1]))
    graphs = batched._graphs  # None: the batch adapter runs without (not a graphs model)
    return {"sizes": list(BATCH_SIZES), "widths": list(BATCH_WIDTHS), "verify_s": verify,
            "draft_step_s": draft_step, "graphs": graphs is not None and graphs.enabled,
            "bucketed": graphs is not None,
            "captured_graphs": 0 if graphs is None else graphs.graphs.capture_count}  # fmt: skip


RUN_SIZES = (1, 4, 16, 32)  # batch sizes of the whole decodes
RUN_TOKENS = (8, 32)  # new tokens of the short and the long decode (dry run: halved)


def batch_runs(
    target: Any, draft: Any, prompt: torch.Tensor, dry_run: bool
) -> dict[str, dict[str, float]]:
    """Per batch size: tokens a second of the target alone and of `adaptive` with `draft`
    (the slope over a short and a long decode, so the prefills cancel), and their ratio."""
    lengths = tuple(n // 2 for n in RUN_TOKENS) if dry_run else RUN_TOKENS
    runs: dict[str, dict[str, float]] = {}
    for rows in RUN_SIZES:
        ids = prompt.expand(rows, -1)
        alone_s, _ = _slope(partial(_decode, target, None, ids), target.device, lengths)
        adaptive_s, _ = _slope(partial(_decode, target, draft, ids), target.device, lengths)
        runs[str(rows)] = {
            "alone_tok_s": rows / alone_s,
            "adaptive_tok_s": rows / adaptive_s,
            "adaptive_over_alone": alone_s / adaptive_s,
        }
    return runs


def _decode(target: Any, draft: Any, ids: torch.Tensor, new_tokens: int) -> Any:
    """One batched greedy decode of `ids` (B, T), `adaptive` where `draft` is given."""
    return generate(
        target,
        draft,
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        num_assistant_tokens_schedule="adaptive",
        eos_token_id=[],
    )
