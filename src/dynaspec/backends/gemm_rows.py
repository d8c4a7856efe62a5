"""How many token rows a forward feeds: a long forward of a transformers model in bf16 on
a CPU is padded to a multiple of 4 rows.

oneDNN's bf16 matrix product (torch's `linear` in bf16 on x86 CPUs with AVX512-BF16) runs
some row counts far slower per row than their neighbours: on a 2-core AMD EPYC (Zen 4,
torch 2.13.0), summed over Qwen2.5-Coder-1.5B's linear shapes, row counts of 256-1099 that
are not multiples of 4 cost 1.05x their neighbouring multiples of 16 per row on average and
up to 1.44x, multiples of 4 1.00x (at most 1.15x); a whole forward of the 1.5B model over
365 tokens took 3.09 s, over 366 tokens 2.76 s, over 407 4.13 s and over 408 3.06 s
(prefill-rows-avx512-2026-12-06, benchmarks/HISTORY.md). Below about 256 rows, in float32 (MKL's
product) and with the static path's prepacked weights (backends/static.py: within a few
percent either way) no such pattern shows. A forward over n >= MIN_PADDED_ROWS tokens (a
prompt's prefill, a draft's catch-up) therefore feeds up to 3 copies of its last token after
them: they come after every real token, so a causal model's real positions never attend
them, their logits are dropped and the cache forgets them at once (backends/hf.py; a
batch's prefill of a joining row, backends/hf_batch.py). A batch's (B, W) block feeds B * W
rows: it is widened by up to 3 columns that are holes in every row (`fed_width`). The real
positions' values are those of a forward over another number of rows: in bf16 they may
differ in the last bit, as any two forwards over different numbers of tokens do (a tie at
most; README, "Lossless").
"""

from __future__ import annotations

import torch

ROW_MULTIPLE = 4  # rows a long bf16 forward is padded to a multiple of
MIN_PADDED_ROWS = 256  # shorter forwards are fed as they are
PADDED_DTYPES = (torch.bfloat16,)  # dtypes whose CPU matrix products show the slow counts


def fed_rows(
    num_tokens: int,
    dtype: torch.dtype | None,
    device: torch.device | str,
    room: int | None = None,
) -> int:
    """Rows to feed a forward over `num_tokens` tokens of a model computing in `dtype` on
    `device`: num_tokens rounded up to a multiple of ROW_MULTIPLE for a long bf16 forward
    on a CPU, else num_tokens itself; also num_tokens itself where the padding would not fit
    the `room` positions left in the model's context (None: no end; absolute position
    tables end)."""
    if (
        num_tokens < MIN_PADDED_ROWS
        or dtype not in PADDED_DTYPES
        or torch.device(device).type != "cpu"
    ):
        return num_tokens
    rows = -(-num_tokens // ROW_MULTIPLE) * ROW_MULTIPLE
    return num_tokens if room is not None and rows > room else rows


def padded(tokens: torch.Tensor, rows: int) -> torch.Tensor:
    """(rows,) `tokens` (n,) followed by copies of its last token."""
    if rows <= tokens.numel():
        return tokens
    return torch.cat([tokens, tokens[-1:].expand(rows - tokens.numel())])


def fed_width(
    num_rows: int, width: int, dtype: torch.dtype | None, device: torch.device | str
) -> int:
    """Columns to feed a (num_rows, width) block of a batch: width widened (by at most 3
    columns) until its num_rows * width rows are a count `fed_rows` keeps as it is."""
    columns = width
    while fed_rows(num_rows * columns, dtype, device) != num_rows * columns:
        columns += 1
    return columns
