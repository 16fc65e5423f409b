"""Every relative link in README.md and docs/*.md resolves: the file exists inside the
repository, and a #fragment names a heading of the target (GitHub's anchor rules)."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(path: Path, *, blank_code: bool = True) -> list[str]:
    """The file's lines outside fenced code blocks, inline code spans blanked (a heading's
    anchor keeps their text, so `anchors` reads them as they are)."""
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "``", line) if blank_code else line)
    return lines


def anchors(path: Path) -> set[str]:
    """The fragments GitHub gives the headings of a Markdown file."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(path, blank_code=False) if path.suffix == ".md" else []:
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))  # a link's text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links() -> list[tuple[Path, str]]:
    links = []
    for document in DOCUMENTS:
        for line in prose(document):
            for match in LINK.finditer(line):
                target = match.group(1) or match.group(2)
                if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: are not checked here
                    links.append((document, target))
    return links


@pytest.mark.parametrize(("document", "target"), relative_links(), ids=lambda v: v if isinstance(v, str) else v.name)
def test_a_relative_link_resolves(document, target):
    path, _, fragment = target.partition("#")
    resolved = (document.parent / path).resolve() if path else document
    assert resolved.is_relative_to(ROOT), f"{document.name}: {target} leaves the repository"
    assert resolved.exists(), f"{document.name}: {target}: no such file"
    if fragment and resolved.suffix == ".md":
        assert fragment in anchors(resolved), f"{document.name}: {target}: no heading #{fragment} in {resolved.name}"


def test_the_documents_have_relative_links_to_check():
    assert len(relative_links()) > 10


def test_the_anchor_rules_match_githubs():
    sample = ROOT / "docs" / "runbook.md"
    assert "cuebotacctdriftpersists" in anchors(sample)
    assert {"runbook-the-alerts"} <= anchors(sample)
