"""Every relative link in README.md and docs/*.md resolves: the file exists inside the
repository, and a #fragment names a heading of the target (GitHub's anchor rules). So does
every docs/ path that code, scripts and deployment files name (a usage line once sent
readers to an operations page that never existed)."""

import re
import subprocess
from pathlib import Path

import pytest

from tests.pages import DOCUMENTS, FENCE, ROOT

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


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
    assert "cuebotacctcuebottablesdrift" in anchors(sample)
    assert {"runbook-the-alerts"} <= anchors(sample)


# Outside the Markdown: code, scripts, the Makefile, CI and deployment files point operators to
# docs/ too (a usage line, an alert's runbook_url, an error message). Those must resolve as well.
MENTION = re.compile(r"(?<![\w/.-])docs/[\w./-]+\.(?:md|png)(?:#[\w-]+)?")


def mentions_outside_markdown() -> list[tuple[str, str]]:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in (".md", ".png") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [(name, mention) for mention in sorted(set(MENTION.findall(text)))]
    return found


@pytest.mark.parametrize(("source", "mention"), mentions_outside_markdown(), ids=lambda v: v)
def test_a_docs_path_named_in_code_or_scripts_exists(source, mention):
    path, _, fragment = mention.partition("#")
    assert (ROOT / path).exists(), f"{source} names {mention}: no such file"
    if fragment:
        assert fragment in anchors(ROOT / path), f"{source} names {mention}: no heading #{fragment}"


def test_code_and_scripts_name_docs_to_check():
    sources = {source for source, _ in mentions_outside_markdown()}
    assert "scripts/screenshots.py" in sources and len(sources) > 5
