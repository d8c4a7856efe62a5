"""Projected batch throughput: the target alone and speculation at batch 1-32, from the batch
costs `dynaspec devicecheck` measured (`graphs.batch_costs`: T_B(n), a forward over B rows of
n tokens, and D_B, the draft's one-token forward over B rows) and the acceptance of the real
pair's traces.

A row drafting k tokens yields E_k = (1 - a^(k+1)) / (1 - a) tokens a round when each drafted
token is accepted with probability a, independently (a: the share of the trace's positions
where the draft's teacher-forced prediction is the target's token); a round of B rows costs
k D_B + T_B(k + 1). So the target alone yields B / T_B(1) tokens a second and speculation
B E_k / (k D_B + T_B(k + 1)), for the widths k + 1 measured. The adaptive column assumes the
rule finds the best of those k per batch size, or stands aside (drafts nothing) where none
pays: an upper bound on a rule that must learn it, labelled as such beside the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynaspec.eval.oracle.records import PromptRecord

LABEL = (
    "projected: batch costs measured on the device, i.i.d. acceptance a from the real pair's "
    "traces (CPU); adaptive = the best measured k per batch size, or none"
)


def trace_acceptance(records: Sequence[PromptRecord]) -> float:
    """a: the share of positions where the draft's teacher-forced token is the target's."""
    agreed = total = 0
    for record in records:
        for index, token in enumerate(record.new_tokens):
            agreed += record.trace.tokens[index] == token
            total += 1
    return agreed / total if total else 0.0


def expected_tokens(acceptance: float, drafted: int) -> float:
    """E_k: tokens a round yields (accepted drafted ones + the target's own)."""
    return sum(acceptance**index for index in range(drafted + 1))


def batch_rows(pair: str, batch: dict[str, Any], acceptance: float) -> list[dict[str, Any]]:
    """One row per batch size: tokens per second alone, speculating at the best k, and the
    adaptive rule's projection (the better of the two), with the ratio to the target alone."""
    rows = []
    for size in batch["sizes"]:
        verify = {int(width): seconds for width, seconds in batch["verify_s"][str(size)].items()}
        draft_s = batch["draft_step_s"][str(size)]
        alone = size / verify[1]
        best_k, best = 0, 0.0
        for width, seconds in sorted(verify.items()):
            drafted = width - 1
            if drafted < 1:
                continue
            rate = size * expected_tokens(acceptance, drafted) / (drafted * draft_s + seconds)
            if rate > best:
                best_k, best = drafted, rate
        adaptive = max(alone, best)
        rows.append(
            {
                "pair": pair,
                "batch": size,
                "alone_tok_s": alone,
                "best_k": best_k,
                "speculative_tok_s": best,
                "adaptive_tok_s": adaptive,
                "adaptive_over_alone": adaptive / alone,
            }
        )
    return rows


def render_batch_markdown(rows: Sequence[dict[str, Any]], acceptance: float) -> list[str]:
    """The batch table's markdown lines (none without rows)."""
    if not rows:
        return []
    lines = [
        "",
        f"## Batches ({LABEL}; a = {acceptance:.2f})",
        "",
        "| pair | batch | alone tok/s | best k | speculative tok/s | adaptive tok/s "
        "| adaptive / alone |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['pair']} | {row['batch']} | {row['alone_tok_s']:.0f} | {row['best_k']} | "
            f"{row['speculative_tok_s']:.0f} | {row['adaptive_tok_s']:.0f} | "
            f"{row['adaptive_over_alone']:.2f}x |"
        )
    return lines
