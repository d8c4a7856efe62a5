"""Every `--flag` of a `dynaspec <command>` line in the README and the user guides is in that
command's `--help`.

A command is found in a fenced code block (continuation lines joined, `&&`, `|`, `;` and
redirections split off) or in an inline code span; quoted text and `# comments` are left
out. A flag the CLI renames or removes fails here until the docs follow it.
"""

from __future__ import annotations

import argparse
import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from dynaspec import cli

ROOT = Path(__file__).resolve().parent.parent
# The README and the user guides (docs/*.md); the design notes under docs/design/ quote
# commands as they were run and are not checked.
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
SEPARATOR = re.compile(r"&&|\|\|?|;|>>?|<")


@cache
def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


@cache
def help_flags(command: str) -> frozenset[str]:
    """The flags `dynaspec COMMAND --help` prints."""
    return frozenset(FLAG.findall(subcommands()[command].format_help()))


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:  # an unclosed quote in prose: drop quoted parts by hand
        return re.sub(r"\"[^\"]*\"?|'[^']*'?", "", segment.split(" #")[0]).split()


def commands_in(text: str) -> list[tuple[str, list[str]]]:
    """(command, flags) of every `dynaspec COMMAND ...` in the text's code."""
    pieces = []
    for block in FENCE.findall(text):
        pieces += re.sub(r"\\\n\s*", " ", block).splitlines()
    pieces += SPAN.findall(FENCE.sub("", text))
    found = []
    for piece in pieces:
        for segment in SEPARATOR.split(piece):
            words = _words(segment)
            if words[:3] == ["python", "-m", "dynaspec"]:
                words = words[2:]
            if len(words) >= 2 and words[0] == "dynaspec" and words[1] in subcommands():
                flags = [w.split("=")[0] for w in words[2:] if FLAG.fullmatch(w.split("=")[0])]
                found.append((words[1], flags))
    return found


def unknown_flags(text: str) -> list[str]:
    return [
        f"dynaspec {command} {flag}"
        for command, flags in commands_in(text)
        for flag in flags
        if flag not in help_flags(command)
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_documented_flag_is_in_its_commands_help(document: Path) -> None:
    missing = unknown_flags(document.read_text(encoding="utf-8"))
    assert not missing, f"{document.name}: flags not in the command's --help: {missing}"


def test_the_readme_has_commands_to_check() -> None:
    found = commands_in((ROOT / "README.md").read_text(encoding="utf-8"))
    commands = {command for command, _ in found}
    assert {"generate", "serve", "bench"} <= commands
    assert sum(len(flags) for _, flags in found) >= 15


@pytest.mark.parametrize(
    "text",
    [
        '```bash\ndynaspec generate --compare --no-such-flag "..."\n```\n',
        '```bash\ndynaspec generate --static \\\n  --made-up 3 "..."  # comment\n```\n',
        "Run `dynaspec serve --max-batch 4 --made-up` to see.\n",
        "```bash\npip install -e . && python -m dynaspec bench --smoke --made-up\n```\n",
    ],
)
def test_a_made_up_flag_is_caught(text: str) -> None:
    assert len(unknown_flags(text)) == 1


def test_flags_of_other_commands_and_quotes_are_not_counted() -> None:
    text = (
        "```bash\npip install --no-deps -r x.txt && dynaspec generate --compare "
        '"text with --not-a-flag"  # or --also-not\n```\n'
        "`dynaspec serve --max-batch 8` and `dynaspec generate --max-batch 8`\n"
    )
    assert commands_in(text) == [
        ("generate", ["--compare"]),
        ("serve", ["--max-batch"]),
        ("generate", ["--max-batch"]),
    ]
    assert unknown_flags(text) == ["dynaspec generate --max-batch"]
