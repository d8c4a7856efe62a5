"""The committed records under benchmarks/, read into runs: one `Run` per record file, with the
machine, date, dynaspec commit and command that wrote it, and its figures as a small table.

The kinds read (benchmarks/README.md names the suites):
- `results.jsonl`: `dynaspec bench`, one record per (prompt, method);
- `batch.jsonl`: `dynaspec bench --batch`, one record per (method, batch size);
- `loadtest-*.json`: `dynaspec loadtest`, one run per client count;
- `memory.jsonl`: benchmarks/memory/run.sh, one record per setting;
- `cross-bench.json`: eval/cross_bench.py, a draft of another family, per method;
- `projection.json` (with its folder's `devicecheck.json`): `dynaspec project` on a GPU's
  costs. A dry run's (a CPU standing in for the GPU) says nothing about a GPU and is skipped.
Other files (plots, rendered tables, traces) are not figures of the results page.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynaspec.eval.results.commands import generate_command, is_peer

PEER_NOTE = "peer"  # the command column of another engine's method
DROPPED_NOTE = "dropped"  # ... of a setting the CLI dropped (slower on every CPU class)


@dataclass(frozen=True)
class Table:
    """Figures of one run, as rendered: header cells and rows of cells."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class MethodFigure:
    """One bench method's figures over a run's prompts (medians of per-prompt values)."""

    method: str
    command: str | None  # the `dynaspec generate` command, None for another engine's method
    exact: bool  # its output is the target's own (checked against `target`, ties allowed)
    prompts: int
    tokens_per_s: float  # median over prompts
    speedup: float | None  # median of per-prompt tok/s over the eager `target`'s; None: no target
    compared: bool  # its outputs were compared with a reference's (not a target alone's own)
    equal: int  # outputs equal to their reference's
    differences: tuple[tuple[str, int], ...]  # the others by the bench's kind: tie, BUG, peer

    @property
    def bugs(self) -> int:
        return dict(self.differences).get("BUG", 0)

    def equal_cell(self) -> str:
        if not self.compared:
            return "-"
        kinds = ", ".join(f"{count} {kind}" for kind, count in self.differences)
        return f"{self.equal}/{self.prompts}" + (f" ({kinds})" if kinds else "")


@dataclass(frozen=True)
class Run:
    """One record file: where it lies, what wrote it, on which machine, and its figures."""

    suite: str  # benchmarks/<suite>/...
    path: str  # relative to the repository root
    kind: str  # bench | batch | loadtest | memory | cross | projection
    machine_class: str  # "AVX2 CPU", "AVX512-BF16 CPU", "CUDA GPU", ...
    machine: str  # the machine in words: model, cores, flags
    date: str  # YYYY-MM-DD
    sha: str  # dynaspec's commit, short, "+dirty" when the tree had edits
    command: str
    table: Table
    methods: tuple[MethodFigure, ...] = ()  # bench runs: what the hardware table picks from


def machine_class(machine: dict[str, Any], device: str | None = None) -> str:
    """The class a figure belongs to: never compare figures across two classes."""
    if device and device != "cpu":
        return "CUDA GPU"
    features = machine.get("cpu_features") or {}
    if features.get("amx_bf16"):
        return "AMX-BF16 CPU"
    if features.get("avx512_bf16"):
        return "AVX512-BF16 CPU"
    if features.get("avx2"):
        return "AVX2 CPU"
    return "CPU"


def describe_machine(machine: dict[str, Any]) -> str:
    """'AMD EPYC, 2 cores; avx2, avx512f, avx512_bf16' (the flags lscpu gave as present)."""
    features = machine.get("cpu_features") or {}
    flags = ", ".join(name for name, present in features.items() if present is True)
    cores = machine.get("cpu_count")
    text = f"{machine.get('cpu_model', 'unknown CPU')}, {cores} cores" if cores else "unknown CPU"
    return f"{text}; {flags}" if flags else text


def _date(started: str | None, path: Path) -> str:
    if started:
        return started[:10]
    found = re.search(r"\d{4}-\d{2}-\d{2}", str(path))
    return found.group(0) if found else "unknown"


def _sha(git: dict[str, Any] | None) -> str:
    if not git or not git.get("sha"):
        return "unknown"
    return git["sha"][:7] + ("+dirty" if git.get("dirty") else "")


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _tps(value: float) -> str:
    return f"{value:.1f}"


def _reference_root(method: str, references: dict[str, str | None]) -> str:
    """The method at the end of `method`'s chain of references: `target` for the target's own
    output, the quantized target alone for a quantized target's."""
    seen = {method}
    while (reference := references.get(method)) and reference not in seen:
        seen.add(reference)
        method = reference
    return method


def method_figures(records: list[dict[str, Any]], pair: str | None) -> tuple[MethodFigure, ...]:
    """Per method, in the order the run first named them: medians over its prompts."""
    by_method: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_method.setdefault(record["method"], []).append(record)
    references = {m: rows[0].get("reference_method") for m, rows in by_method.items()}
    target = {(r["task"], r["prompt_id"]): r["tokens_per_s"] for r in by_method.get("target", [])}
    figures = []
    for method, rows in by_method.items():
        ratios = [
            r["tokens_per_s"] / target[key]
            for r in rows
            if (key := (r["task"], r["prompt_id"])) in target and target[key] > 0
        ]
        kinds = [
            str((r.get("mismatch") or {}).get("kind") or "differ")
            for r in rows
            if not r["matches_target"]
        ]
        peer = is_peer(method, rows[0].get("family"))
        figures.append(
            MethodFigure(
                method=method,
                command=None if peer else generate_command(method, pair),
                exact=not peer and _reference_root(method, references) == "target",
                prompts=len(rows),
                tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                speedup=statistics.median(ratios) if ratios and "target" in by_method else None,
                compared=references[method] is not None,
                equal=sum(bool(r["matches_target"]) for r in rows),
                differences=tuple(sorted((kind, kinds.count(kind)) for kind in set(kinds))),
            )
        )
    return tuple(figures)


def _cpu_run(
    suite: str,
    rel: str,
    kind: str,
    machine: dict[str, Any] | None,
    date: str,
    sha: str,
    command: str,
    table: Table,
    methods: tuple[MethodFigure, ...] = (),
) -> Run:
    """A run whose record names the machine it ran on (`machine_info()`'s dict)."""
    machine = machine or {}
    return Run(
        suite,
        rel,
        kind,
        machine_class(machine),
        describe_machine(machine),
        date,
        sha,
        command,
        table,
        methods,
    )


def _bench(path: Path, suite: str, rel: str) -> Run:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    run = records[0]["run"]
    figures = method_figures(records, run.get("pair"))
    rows = tuple(
        (
            f"`{f.method}`",
            f"`{f.command}`"
            if f.command
            else PEER_NOTE
            if is_peer(f.method, None)
            else DROPPED_NOTE,
            "target's" if f.exact or f.method == "target" else "own",
            str(f.prompts),
            _tps(f.tokens_per_s),
            _x(f.speedup),
            f.equal_cell(),
        )
        for f in figures
    )
    header = ("method", "command", "output", "prompts", "tok/s", "vs eager target", "equal")
    return _cpu_run(
        suite,
        rel,
        "bench",
        run.get("machine"),
        _date(run.get("started_at"), path),
        _sha(run.get("git")),
        run.get("command") or "",
        Table(header, rows),
        figures,
    )


def _batch(path: Path, suite: str, rel: str) -> Run:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    run = records[0]["run"]
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault((record["method"], record["batch_size"]), []).append(record)
    rows = tuple(
        (
            f"`{method}`",
            str(size),
            str(len(batches)),
            _tps(statistics.median(r["tokens_per_s"] for r in batches)),
            _equal_batches(batches),
        )
        for (method, size), batches in groups.items()
    )
    header = ("method", "batch size", "batches", "tok/s (all rows, median)", "equal to reference")
    return _cpu_run(
        suite,
        rel,
        "batch",
        run.get("machine"),
        _date(run.get("started_at"), path),
        _sha(run.get("git")),
        run.get("command") or "",
        Table(header, rows),
    )


def _equal_batches(batches: list[dict[str, Any]]) -> str:
    checked = [r["same_as_reference"] for r in batches if r.get("same_as_reference") is not None]
    return f"{sum(checked)}/{len(checked)}" if checked else "-"


def _loadtest(path: Path, suite: str, rel: str) -> Run:
    record = json.loads(path.read_text(encoding="utf-8"))
    label = record.get("config", {}).get("label") or path.stem.removeprefix("loadtest-")
    rows = tuple(
        (
            label,
            str(r["clients"]),
            f"{r['completed']}/{r['completed'] + r['failed']}",
            _tps(r["tokens_per_s_total"]),
            _tps(r["tokens_per_s_per_client"]),
            f"{r['ttft_p50_s']:.2f} / {r['ttft_p95_s']:.2f}",
            f"{r['latency_p95_s']:.1f}",
            "-" if r.get("equal_to_target_alone") is None else str(r["equal_to_target_alone"]),
        )
        for r in record["runs"]
    )
    header = (
        "label",
        "clients",
        "completed",
        "tok/s total",
        "tok/s a client",
        "TTFT p50 / p95 (s)",
        "latency p95 (s)",
        "equal to target alone",
    )
    return _cpu_run(
        suite,
        rel,
        "loadtest",
        record.get("machine"),
        _date(record.get("started_at"), path),
        _sha(record.get("git")),
        _relative_command(record.get("command") or ""),
        Table(header, rows),
    )


def _relative_command(command: str) -> str:
    """The command as a user types it: `/venv/bin/dynaspec loadtest ...` or
    `.../dynaspec/__main__.py loadtest ...` (as the process saw it) as `dynaspec loadtest ...`."""
    return re.sub(r"^\S*?(/dynaspec/__main__\.py|/bin/dynaspec)(?=\s)", "dynaspec", command)


def _memory(path: Path, suite: str, rel: str) -> Run:
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    rows = tuple(
        (f"`{r['command']}`", f"{r['peak_rss_gb']:.2f}", r["wall"], _sha(r.get("git")))
        for r in records
    )
    return _cpu_run(
        suite,
        rel,
        "memory",
        records[0].get("machine"),
        max(_date(r.get("started_at"), path) for r in records),
        ", ".join(dict.fromkeys(_sha(r.get("git")) for r in records)),
        "benchmarks/memory/run.sh",
        Table(("command", "peak resident (GB)", "wall (m:s)", "dynaspec"), rows),
    )


def _projection(path: Path, suite: str, rel: str) -> Run | None:
    projection = json.loads(path.read_text(encoding="utf-8"))
    costs_path = path.with_name("devicecheck.json")
    check = json.loads(costs_path.read_text(encoding="utf-8")) if costs_path.exists() else {}
    if projection.get("costs_dry_run") or check.get("dry_run"):
        return None
    device = projection.get("costs_device") or "unknown GPU"
    machine = (check.get("provenance") or {}).get("machine") or {}
    profiles = projection.get("profiles") or {}
    rows = tuple(
        (
            row["pair"],
            f"{1000 * profiles[row['pair']]['verify_s'][0]:.1f}"
            if row["pair"] in profiles
            else "-",
            *(_x(row[name]) for name in ("heuristic", "dynamic", "adaptive", "oracle")),
        )
        for row in projection["rows"]
        if row["task"] == "all"
    )
    header = (
        "pair (random weights)",
        "target step (ms)",
        "heuristic",
        "dynamic",
        "adaptive",
        "oracle",
    )
    return Run(
        suite,
        rel,
        "projection",
        "CUDA GPU",
        f"{device}; host {describe_machine(machine)}",
        _date(check.get("started"), path),
        _sha(projection.get("git")),
        f"{check.get('command', '')}; {projection.get('command', '')}".strip("; "),
        Table(header, rows),
    )


def _cross(path: Path, suite: str, rel: str) -> Run:
    """`python -m dynaspec.eval.cross_bench`: a draft of another family (eval/cross_bench.py)."""
    record = json.loads(path.read_text(encoding="utf-8"))
    config = record["config"]
    rows = tuple(
        (
            f"`{method}`",
            _tps(figures["tok_per_s"]),
            _x(figures.get("x_target")),
            _x(figures.get("x_hf_uag")),
            f"{figures['equal']}/{figures['prompts']}"
            + (
                f" ({figures['ties']} tie, {figures['bugs']} BUG)"
                if figures["equal"] < figures["prompts"]
                else ""
            ),
        )
        for method, figures in record["summary"].items()
    )
    argv = config.get("argv") or []
    command = " ".join(["python -m dynaspec.eval.cross_bench", *argv[1:]]) if argv else ""
    return _cpu_run(
        suite,
        rel,
        "cross",
        config.get("machine"),
        _date(None, path),
        _sha(config.get("git")),
        command,
        Table(("method", "tok/s", "vs target alone", "vs transformers' UAG", "equal"), rows),
    )


READERS = {
    "cross-bench.json": _cross,
    "results.jsonl": _bench,
    "batch.jsonl": _batch,
    "memory.jsonl": _memory,
    "projection.json": _projection,
}


def _reader(name: str) -> Any:
    if name.startswith("loadtest-") and name.endswith(".json"):
        return _loadtest
    return READERS.get(name)


def read_runs(root: Path) -> list[Run]:
    """Every run under root/benchmarks, in path order."""
    runs = []
    bench = root / "benchmarks"
    for path in sorted(bench.rglob("*")):
        reader = _reader(path.name)
        if reader is None or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        run = reader(path, path.relative_to(bench).parts[0], rel)
        if run is not None:
            runs.append(run)
    return runs
