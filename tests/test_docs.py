"""Do the docs hold together? Every relative link in a tracked Markdown file
resolves (the file, and the heading an anchor names), and README.md stays one
screen: the two commands first, the rest a link away."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250
FIRST_SCREEN = 40

# [text](target) and ![alt](target), with an optional "title" after the target.
_LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE_SPAN = re.compile(r"(`+).+?\1")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(?P<text>.*?)(?:\s+#+)?\s*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")  # https:, mailto:, ...


@dataclass(frozen=True)
class Link:
    """One link in a Markdown file: where it is and what it points at."""

    source: Path
    line: int
    target: str


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a Markdown text outside code blocks, numbered from 1.

    Fenced blocks and indented blocks (4 spaces after a blank line) are code:
    their brackets are output, not links, and their `#` lines are not headings.

    >>> prose_lines("a [x](y)\\n\\n    [not](link)\\n```\\n# nor this\\n```\\nb")
    [(1, 'a [x](y)'), (2, ''), (7, 'b')]
    """
    kept: list[tuple[int, str]] = []
    fenced = indented = False
    previous_blank = True
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        blank = not line.strip()
        indented = (indented or previous_blank) and not blank and line.startswith("    ")
        previous_blank = blank
        if not (fenced or indented):
            kept.append((number, line))
    return kept


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation gone, spaces as hyphens.

    >>> github_slug("The main job: `cassini emulate`")
    'the-main-job-cassini-emulate'
    >>> github_slug("bmv2 as the fabric's switch")
    'bmv2-as-the-fabrics-switch'
    """
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link shows its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: Path) -> set[str]:
    """Every heading anchor of a Markdown file (repeated headings get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for _, line in prose_lines(markdown.read_text()):
        heading = _HEADING.match(line)
        if heading is None:
            continue
        slug = github_slug(heading["text"])
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(markdown: Path) -> list[Link]:
    """The links of a Markdown file's prose (not in code blocks or code spans)."""
    return [
        Link(markdown, number, match["target"])
        for number, line in prose_lines(markdown.read_text())
        for match in _LINK.finditer(_CODE_SPAN.sub("", line))
    ]


def broken(link: Link, root: Path) -> str | None:
    """Why a relative link does not resolve (None: it does, or it is not relative)."""
    if _SCHEME.match(link.target):
        return None
    path_part, _, anchor = link.target.partition("#")
    if not path_part:
        target = link.source
    elif path_part.startswith("/"):
        target = root / unquote(path_part).lstrip("/")
    else:
        target = link.source.parent / unquote(path_part)
    where = f"{link.source.relative_to(root)}:{link.line}: {link.target}"
    if not target.exists():
        return f"{where}: no {target.relative_to(root) if target.is_relative_to(root) else target}"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{where}: no heading with anchor #{anchor} in {target.name}"
    return None


def tracked_markdown() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed]


def test_every_relative_link_in_the_docs_resolves() -> None:
    files = tracked_markdown()
    found = [link for markdown in files for link in links(markdown)]
    # The checker must have something to check: the docs link to each other.
    assert len(files) > 5 and len(found) > 10, (files, found)
    problems = [why for link in found if (why := broken(link, ROOT)) is not None]
    assert problems == []


def test_readme_is_one_screen_of_commands_then_links() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES
    first_screen = "\n".join(lines[:FIRST_SCREEN])
    assert "make demo" in first_screen and "make test" in first_screen


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## A heading: `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](other.md#a-heading-code), [self](#page), [web](https://example.org/x)\n"
        "[gone](missing.md), [no heading](other.md#nowhere), [no self](#nowhere)\n\n"
        "    [in code](also-missing.md)\n\n`[in a span](missing-too.md)`\n"
    )
    problems = [why for link in links(page) if (why := broken(link, tmp_path)) is not None]
    assert problems == [
        "page.md:4: missing.md: no missing.md",
        "page.md:4: other.md#nowhere: no heading with anchor #nowhere in other.md",
        "page.md:4: #nowhere: no heading with anchor #nowhere in page.md",
    ]
