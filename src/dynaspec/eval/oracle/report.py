"""Writes the oracle report: the JSON summary (dynaspec.eval.oracle.summary), the markdown
report (dynaspec.eval.oracle.markdown) and the PNG plots (dynaspec.eval.oracle.plots)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dynaspec.eval.oracle.markdown import render_markdown
from dynaspec.eval.oracle.plots import write_plots
from dynaspec.eval.oracle.records import PromptAnalysis

SUMMARY_FILE = "oracle_summary.json"
REPORT_FILE = "oracle_report.md"


def write_report(
    summary: dict[str, Any], analyses: Sequence[PromptAnalysis], out: str | Path
) -> list[Path]:
    """Writes the JSON summary, the markdown report and the plots into `out`; returns paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(summary, out)
    summary_path = out / SUMMARY_FILE
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    report_path = out / REPORT_FILE
    report_path.write_text(render_markdown(summary, [p.name for p in plots]))
    return [summary_path, report_path, *plots]
