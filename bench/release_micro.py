"""The release path's micro-optimisations, each against the plainer form it replaced, in one process.

    .venv/bin/python bench/release_micro.py [--rounds 7] [--batch 100]

The comments in accounting/release (rows, decrements, types, eras.redis) say why the code takes
the less obvious form; this measures what that form saves, per batch of --batch releases, where
docs/benchmarks.md ("Figures behind the release path's comments") keeps the figures. Pure
Python, no database: each pair runs in turn in every round, and the median of the rounds'
ratios (plain form ÷ kept form) is printed with its spread. Measured, never asserted.
"""

import argparse
import statistics
import sys
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accounting.live.units import cores_from_centicores  # noqa: E402
from accounting.release.rows import ROW, release_from_row  # noqa: E402
from accounting.release.types import Branch, Release  # noqa: E402


def batch_rows(n: int) -> list[tuple]:
    """n rows as the releasing statement returns them (ROW's columns), of one show, job and layer."""
    values = {
        "proc_id": "proc",
        "host_id": "host",
        "show_id": "show",
        "alloc_id": "alloc",
        "folder_id": "folder",
        "job_id": "job",
        "layer_id": "layer",
        "dept_id": "dept",
        "point_show_id": "show",
        "job_state": "RUNNING",
        "cores_centicores": 100,
        "gpus": 0,
        "memory": 4_000_000,
        "gpu_memory": 0,
        "is_local": False,
        "inserted_by": 1234,
    }
    return [tuple(f"{values[name]}-{i}" if name == "proc_id" else values[name] for name in ROW) for i in range(n)]


def with_keywords(row: tuple, *, branch: Branch) -> Release:
    """The plain form: Release's keyword constructor, field by field from the row."""
    return Release(
        proc_id=row[0],
        host_id=row[1],
        show_id=row[2],
        alloc_id=row[3],
        folder_id=row[4],
        job_id=row[5],
        layer_id=row[6],
        dept_id=row[7],
        point_show_id=row[8],
        job_state=row[9],
        cores_centicores=row[10],
        cores=cores_from_centicores(row[10]),
        gpus=row[11],
        memory=row[12],
        gpu_memory=row[13],
        branch=branch,
    )


@dataclass(frozen=True)
class FrozenRelease:
    """Release as a frozen dataclass: what the named tuple was measured against."""

    proc_id: str
    host_id: str
    show_id: str
    alloc_id: str
    folder_id: str | None
    job_id: str
    layer_id: str
    dept_id: str | None
    point_show_id: str | None
    job_state: str | None
    cores_centicores: int
    cores: int
    gpus: int
    memory: int
    gpu_memory: int
    branch: Branch


def as_dataclass(release: Release) -> FrozenRelease:
    return FrozenRelease(*release)


def add_positionally(totals: list[int], first: int, second: int, at: int = 0) -> None:
    """The kept form (accounting.release.decrements): two amounts, an optional offset, positional."""
    totals[at] += first
    totals[at + 1] += second


def add_any(totals: list[int], *amounts: int, at: int = 0) -> None:
    """The plain form: any number of amounts, the offset by keyword."""
    for i, amount in enumerate(amounts):
        totals[at + i] += amount


def adding_positionally(totals: list[int], n: int) -> None:
    """A batch's adds as decrements() makes them: 5 per release, half of them at an offset."""
    for _ in range(5 * n // 2):
        add_positionally(totals, 1, 2)
        add_positionally(totals, 1, 2, 2)


def adding_any(totals: list[int], n: int) -> None:
    """The same adds in the plain form."""
    for _ in range(5 * n // 2):
        add_any(totals, 1, 2)
        add_any(totals, 1, 2, at=2)


def pairs(n: int) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """Per choice: (the kept form, the plain form), each over one batch of n."""
    rows = batch_rows(n)
    releases = [release_from_row(row, branch=Branch.CUEBOT) for row in rows]
    local = Branch.LOCAL
    totals = [0, 0, 0, 0]
    return {
        "Release straight from the row (tuple.__new__), not by keywords": (
            lambda: [release_from_row(row, branch=Branch.CUEBOT) for row in rows],
            lambda: [with_keywords(row, branch=Branch.CUEBOT) for row in rows],
        ),
        "Release a named tuple, not a frozen dataclass": (
            lambda: [Release(*r) for r in releases],
            lambda: [as_dataclass(r) for r in releases],
        ),
        "the branch's enum member bound once, not looked up per release": (
            lambda: [r.branch is local for r in releases],
            lambda: [r.branch is Branch.LOCAL for r in releases],
        ),
        "amounts added two at a time, positionally (5 adds per release)": (
            lambda: adding_positionally(totals, n),
            lambda: adding_any(totals, n),
        ),
    }


def seconds_per_batch(run: Callable[[], object]) -> float:
    timer = timeit.Timer(run)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat=3, number=number)) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds; each times every pair in turn")
    parser.add_argument("--batch", type=int, default=100, help="releases per batch")
    options = parser.parse_args()
    measured = pairs(options.batch)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in measured}
    for _ in range(options.rounds):
        for label, (kept, plain) in measured.items():
            times[label].append((seconds_per_batch(kept), seconds_per_batch(plain)))
    print(f"per batch of {options.batch}, {options.rounds} rounds: kept form, plain form (µs, medians), plain ÷ kept")
    for label, pairs_timed in times.items():
        kept_us = statistics.median(k for k, _ in pairs_timed) * 1e6
        plain_us = statistics.median(p for _, p in pairs_timed) * 1e6
        ratios = sorted(p / k for k, p in pairs_timed)
        print(
            f"{label:66s} {kept_us:8.1f} {plain_us:8.1f}  "
            f"{statistics.median(ratios):4.2f} ({ratios[0]:.2f}–{ratios[-1]:.2f})"
        )


if __name__ == "__main__":
    main()
