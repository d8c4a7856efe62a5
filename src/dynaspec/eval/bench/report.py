"""Report of a `dynaspec bench` run: a markdown table and PNG plots from results.jsonl.

Definitions (each a median over prompts of a per-prompt ratio, never a ratio of means, so
one slow outlier cannot move a column):

- speedup of method M on a task = median over the task's prompts of
  wall(target alone) / wall(M), both measured on the same prompt in the same run;
- "dyn / HF dyn" = median over prompts of wall(dynaspec dynamic) / wall(transformers
  dynamic): below 1.0 dynaspec is faster;
- "acc/round (dyn)" = tokens accepted per round of dynaspec's dynamic schedule, pooled over
  the task's prompts: sum of accepted drafted tokens / sum of rounds (each round also adds
  the target's own token);
- "mismatches" = (prompt, method) records whose output differs from the target alone,
  with how many of them are numerical ties and how many are bugs.

Runnable alone to re-render a run: ``python -m dynaspec.eval.bench.report results.jsonl [--out
DIR]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from dynaspec.eval.bench.aggregate import mismatch_kind
from dynaspec.eval.bench.args import SMOKE_NOTE
from dynaspec.eval.bench.fast_report import fast_section
from dynaspec.eval.bench.methods import SPEEDUP_COLUMNS
from dynaspec.eval.bench.plots import ACCEPTED_PLOT, SPEEDUP_PLOT, plot_accepted, plot_speedups
from dynaspec.eval.bench.record import BenchRecord, load_records
from dynaspec.eval.bench.tables import (
    ACCEPTED_HEADER,
    HYBRID_HEADER,
    RELATIVE_HEADER,
    TABLE_HEADERS,
    format_mismatches,
    method_table,
    speedup_table,
)

__all__ = [
    "SPEEDUP_COLUMNS",
    "TABLE_HEADERS",
    "format_mismatches",
    "load_records",
    "render_markdown",
    "render_report",
]


def _header(records: Sequence[BenchRecord]) -> list[str]:
    run = records[0].run if records else {}
    config = run.get("config", {})
    versions = run.get("versions", {})
    machine = run.get("machine", {})
    git = run.get("git", {})
    sha = (git.get("sha") or "unknown")[:12] + (" (dirty)" if git.get("dirty") else "")
    lines = [
        f"# dynaspec bench: {run.get('pair', '?')}",
        "",
        f"- target `{run.get('target', '?')}`, draft `{run.get('draft', '?')}`, "
        f"dtype {config.get('dtype', '?')}, greedy, {config.get('max_new_tokens', '?')} new "
        f"tokens, {config.get('num_prompts', '?')} prompts",
        f"- {machine.get('cpu_model') or machine.get('platform', '?')}, "
        f"{machine.get('usable_cpus', '?')} usable CPUs, {machine.get('torch_threads', '?')} "
        f"torch threads",
        f"- torch {versions.get('torch')}, transformers {versions.get('transformers')}, "
        f"dynaspec {versions.get('dynaspec')} at {sha}" + _sklearn_clause(run),
        f"- started {run.get('started_at', '?')}",
        f"- command: `{run.get('command', '?')}`",
    ]
    if run.get("pair") == "smoke":
        lines.append(f"- {SMOKE_NOTE}")
    return lines


def _sklearn_clause(run: dict) -> str:
    """Whether transformers' dynamic tuned its threshold (not said of a smoke run, whose
    reader has nothing to compare it with)."""
    if run.get("pair") == "smoke":
        return ""
    if run.get("sklearn_available"):
        return "; scikit-learn installed (transformers' dynamic tunes its threshold online)"
    return "; scikit-learn not installed (transformers' dynamic keeps its threshold at 0.4)"


def render_markdown(records: Sequence[BenchRecord], plots: Sequence[str] = ()) -> str:
    """The whole table.md text."""
    if not records:
        return "# dynaspec bench\n\nno records\n"
    lines = _header(records)
    lines += [
        "",
        "Speedup over the target alone (median over prompts of per-prompt ratios of tokens per "
        "second: of wall times where the outputs are as long):",
        "",
        speedup_table(records),
        "",
        f"`{ACCEPTED_HEADER}`: drafted tokens accepted per round by dynaspec's dynamic "
        f"schedule (pooled). `{RELATIVE_HEADER}`: median per-prompt wall time of dynaspec "
        f"dynamic / transformers dynamic (< 1: dynaspec faster). `{HYBRID_HEADER}`: median "
        "per-prompt wall time of transformers' prompt lookup (10 tokens) / dynaspec's hybrid "
        "(> 1: the hybrid faster). `mismatches`: outputs that "
        "differ from the target alone, over every method (tie: the target's top logits "
        "within a few dtype steps; BUG: anything else; peer: another engine's output that "
        "differs from its own target alone's).",
        "",
        "Per method, all prompts:",
        "",
        method_table(records),
        *fast_section(records),
    ]
    bad = [r for r in records if r.matches_target is False]
    if bad:
        lines += ["", "Mismatches:", ""] + [_mismatch_line(record) for record in bad]
    if plots:
        lines += [""] + [f"![{Path(plot).stem}]({Path(plot).name})" for plot in plots]
    return "\n".join(lines) + "\n"


def _mismatch_line(record: BenchRecord) -> str:
    info = record.mismatch
    if info is None:
        if mismatch_kind(record) == "peer":
            return (
                f"- **peer** {record.method} on {record.task}/{record.prompt_id}: another "
                "engine's output that differs from its own target alone's (not classified: "
                "no logits)"
            )
        return (
            f"- **BUG** {record.method} on {record.task}/{record.prompt_id}: new token None, "
            "target None vs None"
        )
    return (
        f"- **{info.kind}** {record.method} on {record.task}/{record.prompt_id}: new token "
        f"{info.position}, target {info.target_token} vs {info.method_token}"
        + (f", {info.steps:.1f} {info.dtype} steps from the top logit" if info.steps else "")
    )


def render_report(jsonl_path: str | os.PathLike[str], out_dir: str | os.PathLike[str]) -> str:
    """Writes table.md, speedup.png and accepted_per_round.png into `out_dir`; returns the
    markdown. Plots are skipped with a note on stderr when matplotlib is not installed
    (``pip install dynaspec[bench]``)."""
    records = load_records(jsonl_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plots: list[str] = []
    if records:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print(
                "dynaspec bench: matplotlib is not installed, no plots "
                "(pip install 'dynaspec[bench]')",
                file=sys.stderr,
            )
        else:
            plot_speedups(records, out / SPEEDUP_PLOT)
            plot_accepted(records, out / ACCEPTED_PLOT)
            plots = [SPEEDUP_PLOT, ACCEPTED_PLOT]
    markdown = render_markdown(records, plots)
    (out / "table.md").write_text(markdown, encoding="utf-8")
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dynaspec.eval.bench.report",
        description="Re-render table.md and the plots of a dynaspec bench results.jsonl.",
    )
    parser.add_argument("jsonl", help="results.jsonl of a run")
    parser.add_argument("--out", help="output folder (default: the JSONL's folder)")
    args = parser.parse_args(argv)
    out = args.out or str(Path(args.jsonl).parent)
    print(render_report(args.jsonl, out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
