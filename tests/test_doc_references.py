"""Every reference to a document resolves: in src/, docs/ and README.md, a cited file exists,
and a cited section is a heading of that file.

The forms checked:
- `docs/NAME.md` or `docs/FOLDER/NAME.md` anywhere (code, docstrings, comments, markdown): the
  file exists;
- `docs/NAME.md ("Section name")`: a heading with exactly that text (line breaks and runs of
  spaces inside the quotes count as one space);
- `NAME.md#anchor` (with or without `docs/`): a heading whose GitHub anchor is `anchor`;
- in a markdown file, a relative link `[text](path.md)` or `[text](path.md#anchor)` from the
  file's own folder, and `[text](#anchor)` within the file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs"

# docs/x.md or docs/sub/x.md, then optionally #anchor or ("Section") (the section may wrap
# across lines); not the target of a markdown link, which LINK reads.
CITATION = re.compile(
    r"(?<![\w./-])(?<!\]\()(?P<path>(?:docs/(?:[\w-]+/)*)?[\w.-]+\.md)"
    r"(?:#(?P<anchor>[\w-]+)|\s+\(\"(?P<section>[^\"]+)\"\))?"
)
# A markdown link to a relative file or an anchor: [text](path.md#anchor), [text](#anchor).
LINK = re.compile(r"\]\((?P<path>[^)\s#:]*\.md)?(?:#(?P<anchor>[^)\s]+))?\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<text>.+?)\s*#*\s*$")


@dataclass(frozen=True)
class Reference:
    source: Path  # the file that cites
    line: int
    path: Path  # the cited file, resolved
    section: str | None = None
    anchor: str | None = None

    def __str__(self) -> str:
        where = f'("{self.section}")' if self.section else f"#{self.anchor}" if self.anchor else ""
        return f"{_shown(self.source)}:{self.line}: {_shown(self.path)} {where}".rstrip()


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def headings(path: Path) -> list[str]:
    """The headings of a markdown file, outside fenced code blocks."""
    found, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := HEADING.match(line)):
            found.append(match["text"])
    return found


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the file's headings (repeats get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(path):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def references_in(source: Path, root: Path = ROOT) -> list[Reference]:
    """The document references of one file (see the module docstring for the forms)."""
    text = source.read_text(encoding="utf-8")
    found = []
    for match in CITATION.finditer(text):
        path, section = match["path"], match["section"]
        if not path.startswith(f"{DOCS}/") and not (section or match["anchor"]):
            continue  # a bare name (table.md, an output file) cites nothing
        folder = root if path.startswith(f"{DOCS}/") else root / DOCS
        found.append(
            Reference(
                source,
                _line(text, match.start()),
                folder / path,
                " ".join(section.split()) if section else None,
                match["anchor"],
            )
        )
    if source.suffix == ".md":
        for match in LINK.finditer(text):
            path = source.parent / match["path"] if match["path"] else source
            line = _line(text, match.start())
            found.append(Reference(source, line, path.resolve(), None, match["anchor"]))
    return list(dict.fromkeys(found))  # [docs/x.md](docs/x.md) once


def problem(reference: Reference) -> str | None:
    """What is wrong with a reference, in words, or None when it resolves."""
    if not reference.path.is_file():
        return f"{reference}: no such file"
    if reference.section and reference.section not in headings(reference.path):
        return f"{reference}: no heading with this text"
    if reference.anchor and reference.anchor not in anchors(reference.path):
        return f"{reference}: no heading with this anchor"
    return None


def sources(root: Path = ROOT) -> list[Path]:
    """The files whose references are checked: src/ (Python), docs/ and README.md."""
    return [
        *sorted((root / "src").rglob("*.py")),
        *sorted((root / DOCS).rglob("*.md")),
        root / "README.md",
    ]


def test_every_doc_reference_resolves() -> None:
    references = [ref for source in sources() for ref in references_in(source)]
    assert len(references) >= 10  # the scan finds the citations at all
    broken = [text for ref in references if (text := problem(ref)) is not None]
    assert not broken, "references that do not resolve:\n" + "\n".join(broken)


def test_the_eval_citations_name_their_sections() -> None:
    cited = {
        (ref.source.name, ref.section or ref.anchor)
        for source in sources()
        if "eval" in source.parts or source.name == "mismatch.py"  # the tie rule, in the library
        for ref in references_in(source)
    }
    assert ("mismatch.py", "Lossless in bf16: ties") in cited
    assert ("run.py", "Lossless in bf16: ties") in cited  # eval/bench/run.py
    assert ("__init__.py", "The oracle lookahead") in cited  # eval/oracle/__init__.py
    assert ("summary.py", "The oracle lookahead") in cited
    assert ("markdown.py", "the-oracle-lookahead") in cited


@pytest.mark.parametrize(
    "citation,message",
    [
        ('see docs/nowhere.md ("Intro")', "no such file"),
        ("see docs/design/nowhere.md", "no such file"),
        ('see docs/guide.md ("Missing\n  section")', "no heading with this text"),
        ("see docs/guide.md#missing-section", "no heading with this anchor"),
        ("see guide.md#nothing-here", "no heading with this anchor"),
    ],
)
def test_the_checker_reports_a_broken_reference(tmp_path: Path, citation, message) -> None:
    (tmp_path / DOCS).mkdir()
    (tmp_path / DOCS / "guide.md").write_text("# Guide\n\n## Lossless in bf16: ties\n")
    source = tmp_path / "module.py"
    source.write_text(f'"""{citation}"""\n')
    [reference] = references_in(source, root=tmp_path)
    assert message in (problem(reference) or "")


def test_the_checker_accepts_sections_anchors_and_links(tmp_path: Path) -> None:
    (tmp_path / DOCS).mkdir()
    guide = tmp_path / DOCS / "guide.md"
    guide.write_text(
        "# Guide\n\n## Lossless in bf16: ties\n\n```\n# not a heading\n```\n\n"
        "See [the top](#guide) and [ties](guide.md#lossless-in-bf16-ties).\n"
    )
    source = tmp_path / "module.py"
    source.write_text('"""docs/guide.md ("Lossless in\n    bf16: ties"); docs/guide.md"""\n')
    references = references_in(source, root=tmp_path) + references_in(guide, root=tmp_path)
    assert len(references) == 4
    assert [problem(ref) for ref in references] == [None] * 4
    assert headings(guide) == ["Guide", "Lossless in bf16: ties"]
