"""The pages the docs tests read: which, and their parts (prose, code spans, fenced blocks).

OPERATOR_PAGES are what an operator of a current-OpenCue site reads (README, the page that deploys,
the first hour, production, the runbook and the dashboard): the pages whose every text block must
be a checked sample and every count a checked one.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
OPERATOR_PAGES = [
    ROOT / "README.md",
    *(
        DOCS / f"{name}.md"
        for name in ("eras", "deploy", "attaching", "production", "runbook", "grafana", "configuration")
    ),
]
FENCE = re.compile(r"^\s*(```|~~~)")


def split_fenced(text: str) -> tuple[str, str]:
    """(the text outside fenced blocks, the text inside them), each with its lines in order."""
    outside, inside, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        (inside if fenced else outside).append(line)
    return "\n".join(outside), "\n".join(inside)


def section(text: str, heading: str) -> str:
    """The section under `heading` (a whole heading line), up to the next heading of its level or
    above outside a fenced block (a shell comment in one is no heading)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines(keepends=True)
    start = lines.index(f"{heading}\n")
    taken, fenced = [lines[start]], False
    for line in lines[start + 1 :]:
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(rf"#{{1,{level}}} ", line):
            break
        taken.append(line)
    return "".join(taken)


def words(text: str) -> int:
    """Words as `wc -w` counts them: runs of non-blank characters, code included."""
    return len(text.split())
