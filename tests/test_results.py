"""`dynaspec results`: docs/results.md and the README's hardware block come from the committed
records, --check catches an edited figure, and every command it prints parses."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from dynaspec.cli import build_parser, main
from dynaspec.eval.results.commands import METHOD_FLAGS, generate_command
from dynaspec.eval.results.hardware import BEGIN, END, render_hardware, replace_block
from dynaspec.eval.results.records import machine_class, read_runs
from dynaspec.eval.results.run import PAGE, README, differences

ROOT = Path(__file__).resolve().parents[1]
AVX512 = {"avx2": True, "avx512f": True, "avx512_bf16": True, "amx_bf16": False}
MACHINE = {"cpu_model": "Test CPU", "cpu_count": 2, "cpu_features": AVX512}


def _record(method: str, prompt: str, tokens_per_s: float, reference: str | None) -> dict:
    return {
        "task": "code",
        "prompt_id": prompt,
        "method": method,
        "family": "llamacpp" if method.startswith("llamacpp") else "dynaspec",
        "tokens_per_s": tokens_per_s,
        "matches_target": True,
        "mismatch": None,
        "reference_method": reference,
        "run": {
            "pair": "qwen2.5-coder",
            "started_at": "2026-12-06T10:00:00+00:00",
            "command": "dynaspec bench --methods ...",
            "machine": MACHINE,
            "git": {"sha": "0123456789abcdef", "dirty": False},
        },
    }


def _repository(root: Path, readme: str = f"# x\n\n{BEGIN}\nold\n{END}\n\nafter\n") -> Path:
    """A repository with one speed run: the target, an exact and a quantized setting."""
    run = root / "benchmarks" / "speed" / "avx512-2026-12-06"
    run.mkdir(parents=True)
    records = []
    for prompt, base in (("p0", 4.0), ("p1", 5.0), ("p2", 6.0)):
        records += [
            _record("target", prompt, base, "target"),
            _record("static-target", prompt, base * 1.5, "target"),
            _record("fast-hybrid-w4a8", prompt, base * 5, "static-target"),
            _record("w4a8-target", prompt, base * 4, None),
            _record("w4a8-hybrid-w4a8", prompt, base * 8, "w4a8-target"),
            _record("llamacpp-target", prompt, base * 9, None),
        ]
    lines = [json.dumps(record) for record in records]
    (run / "results.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "README.md").write_text(readme, encoding="utf-8")
    return root


def test_the_committed_page_and_readme_block_match_the_records() -> None:
    found = differences(ROOT)
    if any(str(README) in text and "no " in text for text in found):
        pytest.skip("README.md has no results:hardware markers yet (the docs rewrite adds them)")
    assert found == [], "run `dynaspec results` and commit docs/results.md and README.md"


def test_check_catches_an_edited_figure(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    assert main(["results", "--root", str(root)]) == 0
    assert main(["results", "--check", "--root", str(root)]) == 0
    page = (root / PAGE).read_text(encoding="utf-8")
    assert "| `w4a8-hybrid-w4a8` |" in page and "8.00x" in page
    (root / PAGE).write_text(page.replace("8.00x", "9.00x"), encoding="utf-8")
    assert main(["results", "--check", "--root", str(root)]) == 1
    assert differences(root) == [f"{PAGE} differs from the records"]


def test_check_catches_an_edited_readme_figure(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    assert main(["results", "--root", str(root)]) == 0
    readme = (root / README).read_text(encoding="utf-8")
    (root / README).write_text(readme.replace("(8.00x)", "(8.10x)"), encoding="utf-8")
    assert differences(root) == [f"{README}'s hardware block differs from the records"]


def test_a_changed_record_changes_the_page(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    assert main(["results", "--root", str(root)]) == 0
    records = root / "benchmarks" / "speed" / "avx512-2026-12-06" / "results.jsonl"
    text = records.read_text(encoding="utf-8")
    records.write_text(text.replace('"tokens_per_s": 40.0', '"tokens_per_s": 41.0'))
    assert f"{PAGE} differs from the records" in differences(root)


def test_the_hardware_block_picks_the_fastest_exact_and_quantized_settings(
    tmp_path: Path,
) -> None:
    root = _repository(tmp_path)
    block = render_hardware(read_runs(root))
    [avx2, avx512, gpu] = block.splitlines()[2:]
    assert avx2.count("not measured") == 4  # no AVX2 run
    assert '`dynaspec generate --static --draft-quantize w4a8 --prompt-lookup 32 "..."`' in avx512
    assert "| 25.0 (5.00x) |" in avx512  # median tok/s, median per-prompt ratio
    assert "--quantize w4a8 --draft-quantize w4a8 --prompt-lookup 32" in avx512
    assert "| 40.0 (8.00x) |" in avx512
    assert "llamacpp" not in avx512  # another engine is never the recommendation
    assert "not measured" in gpu


def test_a_baseline_of_older_code_never_heads_the_hardware_block(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    speed = root / "benchmarks" / "speed"
    records = (speed / "avx512-2026-12-06" / "results.jsonl").read_text(encoding="utf-8")
    faster = [json.loads(line) for line in records.splitlines()]
    for record in faster:  # the exact setting twice as fast on every prompt
        if record["method"] == "fast-hybrid-w4a8":
            record["tokens_per_s"] *= 2
    (speed / "avx512-2026-12-07" / "before").mkdir(parents=True)
    lines = "\n".join(json.dumps(record) for record in faster) + "\n"
    (speed / "avx512-2026-12-07" / "before" / "results.jsonl").write_text(lines)
    assert "| 25.0 (5.00x) |" in render_hardware(read_runs(root))  # not the before/ run's
    (speed / "avx512-2026-12-07" / "before").rename(speed / "avx512-2026-12-07" / "after")
    assert "| 25.0 (5.00x) |" not in render_hardware(read_runs(root))  # the control


def test_the_readme_block_is_replaced_between_its_markers_only() -> None:
    readme = f"before\n{BEGIN}\nold\n{END}\nafter\n"
    assert replace_block(readme, "new") == f"before\n{BEGIN}\nnew\n{END}\nafter\n"
    assert replace_block("no markers\n", "new") is None


def test_without_markers_the_readme_is_left_alone(tmp_path: Path) -> None:
    root = _repository(tmp_path, readme="# no block\n")
    assert main(["results", "--root", str(root)]) == 0
    assert (root / README).read_text(encoding="utf-8") == "# no block\n"
    assert main(["results", "--check", "--root", str(root)]) == 1


@pytest.mark.parametrize("method", sorted(METHOD_FLAGS))
def test_every_command_parses_with_the_cli(method: str) -> None:
    command = generate_command(method)
    assert command is not None
    argv = shlex.split(command)
    assert argv[:2] == ["dynaspec", "generate"]
    args = build_parser().parse_args(argv[1:])  # a renamed flag exits 2 here
    assert args.command == "generate"


def test_machine_classes() -> None:
    assert machine_class({"cpu_features": {"avx2": True}}) == "AVX2 CPU"
    assert machine_class({"cpu_features": AVX512}) == "AVX512-BF16 CPU"
    assert machine_class({"cpu_features": AVX512}, device="cuda:0") == "CUDA GPU"


def test_every_committed_record_is_read(tmp_path: Path) -> None:
    """The committed suites' records all load; a dry run's projection is left out."""
    runs = read_runs(ROOT)
    kinds = {run.kind for run in runs}
    assert {"bench", "batch", "loadtest", "memory", "cross", "projection"} <= kinds
    assert not any("dry-run" in run.path for run in runs)
    shutil.copytree(ROOT / "benchmarks" / "gpu", tmp_path / "benchmarks" / "gpu")
    assert all(run.machine_class == "CUDA GPU" for run in read_runs(tmp_path))
