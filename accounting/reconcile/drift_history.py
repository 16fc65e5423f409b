"""Drift as one idea: the row every source (accounting.reconcile.tables_against_procs, .redis_against_pg) reports drifted,
which the check, the record, the gauges and every face take; and when each was first seen.

A check reads drift at one instant: a row 4 cores high reads the same whether it drifted a second
ago (a release about to land) or three days ago (a leak nobody repaired). record_drift keeps per
row the first check that saw it drifted (DriftRecord.first_seen; checks are minutes apart, so a
row drifted and repaired between two is never seen) and its difference as the latest check read
it, and deletes the record of a row back at its sum. It writes acct_drift_record only, the
service's own table (the check stays read-only on Cuebot's schema), and only what changed, so
drift that stays put costs one read per check; one transaction per check and source, under an
advisory lock, so two checks that overlap do not interleave.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from accounting.live.units import hundredths_text
from accounting.models import DriftRecord


@dataclass(frozen=True)
class Drifted:
    """A row a source found drifted, in DriftRecord's terms (stored minus true; None where the row
    holds no such value); `raw`, the source's own row (None for one read back from the record)."""

    source: str
    identity: str  # the row from check to check
    show_id: str
    subject: str
    detail: str
    cores_difference: int | None
    gpus_difference: int | None
    difference: str
    raw: Any = field(default=None, compare=False)


def cores_words(centicores: int) -> str:
    """A difference in cores as the faces say it, two decimals as PostgreSQL keeps them: '4.00 cores high'."""
    return f"{hundredths_text(abs(centicores))} cores {direction(centicores)}"


def gpus_words(gpus: int) -> str:
    return f"{abs(gpus)} GPU{'' if abs(gpus) == 1 else 's'} {direction(gpus)}"


def direction(difference: int) -> str:
    """Stored above the truth (Redis above PostgreSQL) reads high."""
    return "high" if difference > 0 else "low"


@dataclass(frozen=True)
class DriftAge:
    """A drifted row's time drifted: from the first check that saw it drifted to `seen`, the last
    time it was seen so (now, on a face that has just read the row drifted; the last check that
    saw it, on one that lists the check's records)."""

    first_seen: datetime
    seen: datetime

    @property
    def seconds(self) -> int:
        return max(0, int((self.seen - self.first_seen).total_seconds()))

    @property
    def since(self) -> str:
        """The first sighting as a clock reads it in UTC, with its date when not `seen`'s day."""
        first = self.first_seen.astimezone(UTC)
        same_day = first.date() == self.seen.astimezone(UTC).date()
        return f"{first:%H:%M} UTC" if same_day else f"{first:%Y-%m-%d %H:%M} UTC"

    @property
    def age(self) -> str:
        return age_text(self.seconds)


@dataclass(frozen=True)
class Shown:
    """A drifted row as its source names it for the faces: its numbers as JSON (`values`) and as a
    line's cells (`numbers`), the raw id a script looks it up by (`ref`), none for a record; and its
    time drifted (None: no check has seen it drifted yet, or a row explained away, never aged)."""

    row: Drifted
    name: str
    what: str
    values: dict = field(default_factory=dict)
    numbers: str = ""
    ref: str = ""
    age: DriftAge | None = None

    @property
    def since(self) -> str:
        """'4.00 cores high since 03:12 UTC (2 h 5 min)', the words every face says of a drifted row."""
        if self.age is None:
            return f"{self.row.difference}, not seen drifted by the periodic check yet"
        return f"{self.row.difference} since {self.age.since} ({self.age.age})"

    def as_dict(self) -> dict:
        """What the API and acct_drift --json give of a row (nulls: no check has seen it yet)."""
        return {
            **self.values,
            "first_seen": self.age.first_seen.isoformat() if self.age else None,
            "age_seconds": self.age.seconds if self.age else None,
            "since": self.since,
        }

    @property
    def line(self) -> str:
        """acct_drift's line: name, what, the source's numbers, since when, the raw id."""
        return f"{self.name}\t{self.what}\t{self.numbers}\t{self.since}\t{self.ref}"


def age_text(seconds: int) -> str:
    """A duration as an operator reads it: '45 s', '12 min', '2 h 5 min', '3 d 4 h'."""
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 60:
        return f"{seconds} s"
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"


def ages(rows: Sequence[Drifted], *, now: datetime) -> list[DriftAge | None]:
    """Per row read drifted at `now`, in order, its time drifted if the periodic check has recorded
    it (None: no check saw it yet), in one query whatever the rows' sources."""
    first: dict[tuple[str, str], datetime] = {}
    if rows:
        records = DriftRecord.objects.filter(identity__in={row.identity for row in rows})
        first = {
            (source, identity): at for source, identity, at in records.values_list("source", "identity", "first_seen")
        }
    return [
        DriftAge(first_seen=first[(row.source, row.identity)], seen=now)
        if (row.source, row.identity) in first
        else None
        for row in rows
    ]


def recorded() -> list[tuple[Drifted, str, datetime]]:
    """Every row the last checks found drifted, oldest first: the row, its show's name and its
    first sighting."""
    columns = [name for name in Drifted.__dataclass_fields__ if name != "raw"]  # DriftRecord's too
    records = DriftRecord.objects.order_by("first_seen", "show_name", "subject", "detail")
    return [(Drifted(*(getattr(r, name) for name in columns)), r.show_name, r.first_seen) for r in records]


# What a later check may find changed of a row already recorded (first_seen never changes).
_KEPT_FRESH = ("show_id", "show_name", "subject", "detail", "cores_difference", "gpus_difference", "difference")


@dataclass(frozen=True)
class _Plan:
    """What a check must write to make a source's records say what it found."""

    first_seen: dict[str, datetime]  # identity -> first sighting, of the rows recorded already
    fresh: list[list]  # rows first seen: identity and _KEPT_FRESH's values
    changed: list[DriftRecord]  # records whose row says something else now (pk and the fields)
    gone: list[int]  # pks of records whose row is back at its sum

    @property
    def writes(self) -> bool:
        return bool(self.fresh or self.changed or self.gone)


def _plan(*, source: str, found: dict[str, list]) -> _Plan:
    first_seen, changed, gone = {}, [], []
    for pk, identity, first, *kept in DriftRecord.objects.filter(source=source).values_list(
        "pk", "identity", "first_seen", *_KEPT_FRESH
    ):
        current = found.get(identity)
        if current is None:
            gone.append(pk)
            continue
        first_seen[identity] = first
        if kept != current:
            changed.append(DriftRecord(pk=pk, **dict(zip(_KEPT_FRESH, current, strict=True))))
    fresh = [[identity, *current] for identity, current in found.items() if identity not in first_seen]
    return _Plan(first_seen=first_seen, fresh=fresh, changed=changed, gone=gone)


def record_drift(
    *, source: str, rows: Sequence[Drifted], show_names: dict[str, str], checked_at: datetime
) -> dict[str, float]:
    """What one check of `source` found: a record made for each row not recorded yet (first seen
    at `checked_at`), one already recorded kept (its first sighting with it) and rewritten only if
    what it says changed, every other record of the source deleted. Returns, per show with a
    drifted row, the age at `checked_at` of its oldest, in seconds.

    It reads the source's records and writes only the differences, so drift that stays put
    (or none) costs that one read per check. Writes happen under the source's lock, after
    reading again under it (another check may have written since)."""
    found = {
        row.identity: [
            show_names.get(row.show_id, row.show_id) if name == "show_name" else getattr(row, name)
            for name in _KEPT_FRESH
        ]
        for row in rows
    }
    plan = _plan(source=source, found=found)
    if plan.writes:
        with transaction.atomic():
            _lock(source=source)
            plan = _plan(source=source, found=found)
            if plan.fresh:
                _insert(source=source, rows=plan.fresh, first_seen=checked_at)
            if plan.changed:
                DriftRecord.objects.bulk_update(plan.changed, fields=list(_KEPT_FRESH))
            if plan.gone:
                DriftRecord.objects.filter(pk__in=plan.gone).delete()
    oldest: dict[str, datetime] = {}
    for row in rows:
        first = plan.first_seen.get(row.identity, checked_at)
        oldest[row.show_id] = min(first, oldest.get(row.show_id, first))
    return {show_id: (checked_at - first).total_seconds() for show_id, first in oldest.items()}


# Rows first seen, one array per column: bulk_create's VALUES list (ten parameters a row) took
# twice as long for 100 rows, an eighth of the check at Maestro's size (docs/benchmarks.md).
_INSERT = """
INSERT INTO {table} (source, first_seen, identity, {kept})
SELECT %s, %s, * FROM unnest(%s::text[], {arrays})"""
_ARRAY_TYPES = {"cores_difference": "bigint[]", "gpus_difference": "bigint[]"}


def _insert(*, source: str, rows: Sequence[list], first_seen: datetime) -> None:
    sql = _INSERT.format(
        table=connection.ops.quote_name(DriftRecord._meta.db_table),
        kept=", ".join(_KEPT_FRESH),
        arrays=", ".join(f"%s::{_ARRAY_TYPES.get(name, 'text[]')}" for name in _KEPT_FRESH),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [source, first_seen, *map(list, zip(*rows, strict=True))])


def forget_drift(*, source: str) -> int:
    """Every record of a source no check reads any more (Redis's, once the site left the redis
    era); the number deleted."""
    with transaction.atomic():
        _lock(source=source)
        deleted, _ = DriftRecord.objects.filter(source=source).delete()
    return deleted


def _lock(*, source: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"acct_drift_record {source}"])
