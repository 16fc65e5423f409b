"""The order every writer of the accounting tables locks their rows in: Cuebot's own.

A release, its settling recount and a repair each take their tables' rows in LOCK_ORDER (through
in_lock_order), so they and Cuebot's release wait for each other one way only instead of
deadlocking (accounting.release.unbook says how); the drift faces list rows by table in it too.
host_local is a release's alone: nothing recomputes it.
"""

from collections.abc import Iterable
from typing import Protocol, TypeVar

LOCK_ORDER = ("subscription", "layer_resource", "job_resource", "host_local", "folder_resource", "point")


class _OfTable(Protocol):
    @property
    def table(self) -> str: ...


_Statement = TypeVar("_Statement", bound=_OfTable)


def in_lock_order(statements: Iterable[_Statement]) -> tuple[_Statement, ...]:
    """`statements`, each for one table, sorted by LOCK_ORDER."""
    return tuple(sorted(statements, key=lambda statement: LOCK_ORDER.index(statement.table)))
