"""`dynaspec results`: write docs/results.md and the README's hardware block from the records
under benchmarks/, or with --check say whether either differs from what they give."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dynaspec.eval.results.hardware import BEGIN, END, render_hardware, replace_block
from dynaspec.eval.results.page import render_page
from dynaspec.eval.results.records import read_runs

PAGE = Path("docs") / "results.md"
README = Path("README.md")


def add_results_arguments(parser: argparse.ArgumentParser) -> None:
    """`dynaspec results`'s arguments and runner."""
    parser.add_argument(
        "--check",
        dest="check_only",  # args.check is the CLI's hook for argument checks (cli.main)
        action="store_true",
        help="write nothing; exit 1 when docs/results.md or the README's hardware block "
        "differs from what the records give",
    )
    parser.add_argument("--root", default=".", help="the repository's root")
    parser.set_defaults(func=run_results)


def expected(root: Path) -> tuple[str, str | None]:
    """(the page, the README with its block) as the records give them; the README is None
    when it has no block markers."""
    runs = read_runs(root)
    readme = root / README
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    return render_page(runs), replace_block(text, render_hardware(runs))


def differences(root: Path) -> list[str]:
    """What differs from the records, in words (empty: all up to date)."""
    page, readme = expected(root)
    found = []
    current = root / PAGE
    if not current.exists() or current.read_text(encoding="utf-8") != page:
        found.append(f"{PAGE} differs from the records")
    if readme is None:
        found.append(f"{README} has no {BEGIN} ... {END} block")
    elif (root / README).read_text(encoding="utf-8") != readme:
        found.append(f"{README}'s hardware block differs from the records")
    return found


def run_results(args: argparse.Namespace) -> int:
    root = Path(args.root)
    if args.check_only:
        found = differences(root)
        for text in found:
            print(f"{text}: run `dynaspec results` and commit the result", file=sys.stderr)
        return 1 if found else 0
    page, readme = expected(root)
    (root / PAGE).parent.mkdir(parents=True, exist_ok=True)
    (root / PAGE).write_text(page, encoding="utf-8")
    print(f"wrote {root / PAGE}")
    if readme is None:
        print(
            f"{README} has no {BEGIN} ... {END} lines: its table was not written", file=sys.stderr
        )
    else:
        (root / README).write_text(readme, encoding="utf-8")
        print(f"wrote the hardware block of {root / README}")
    return 0
