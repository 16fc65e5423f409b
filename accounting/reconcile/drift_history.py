"""When each drifted row was first seen: the periodic drift check's memory, in the project's own table.

Why: a check reads drift as it is at one instant, so a row 4 cores high reads the same whether it
drifted a second ago (a release or a repair about to land) or three days ago (a leak nobody
repaired). The periodic check (accounting.reconcile.drift_check) hands every drifted row it found
to record_drift, which keeps per row the time of the first check that saw it drifted
(DriftRecord.first_seen) and its difference as the latest check read it, and deletes the record
of every row of that source the check found back at its sum: such a row leaves every list. The
drift pages, the API, acct_drift and the age gauge an alert fires on read these records.

"First seen" is the first check that saw the row drifted, checks being minutes apart (the
`acct-drift-check` schedule): a row drifted and repaired between two checks is never seen, and
one repaired and drifted again between two checks reads as one drift.

It writes acct_drift_record only, never a Cuebot table: the check stays read-only on Cuebot's
schema, so a role that may only SELECT Cuebot's tables can run it (the record is the service's
own, which its role owns). It writes only what changed (a row first seen, a difference that
moved, a row healed), so a farm whose drift stays put costs one read per check. Writes are one
transaction per check and source, under a transaction-level advisory lock, so two checks that
overlap (a slow one and the next) do not interleave them.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction

from accounting.live.units import UNLIMITED
from accounting.models import DriftRecord
from accounting.reconcile.cuebot_drift import TableDrift
from accounting.reconcile.drift import BOOKED_FIELDS, DriftRow

# The Redis fields that hold cores (whole cores: Redis's unit) and those that hold GPUs; any
# other (a job's priority) is a plain number.
REDIS_CORE_FIELDS = frozenset({"int_cores", "size", "burst", "int_min_cores", "int_max_cores"})
REDIS_GPU_FIELDS = frozenset({"int_gpus", "int_min_gpus", "int_max_gpus"})


@dataclass(frozen=True)
class Seen:
    """One drifted row as a check found it, in DriftRecord's terms."""

    identity: str
    show_id: str
    show_name: str
    subject: str
    detail: str
    cores_difference: int | None  # centicores
    gpus_difference: int | None
    difference: str


def table_identity(row: TableDrift) -> str:
    """A row of Cuebot's tables from check to check: job_resource's two column pairs are two rows."""
    return f"{row.table} {row.pk} ({row.columns})"


def redis_identity(*, key: str, field: str) -> str:
    return f"{key} {field}"


def cores_words(centicores: int) -> str:
    """A difference in cores as the faces say it, two decimals as PostgreSQL keeps them: '4.00 cores high'."""
    whole, hundredths = divmod(abs(centicores), 100)
    return f"{whole}.{hundredths:02d} cores {_direction(centicores)}"


def gpus_words(gpus: int) -> str:
    return f"{abs(gpus)} GPU{'' if abs(gpus) == 1 else 's'} {_direction(gpus)}"


def _direction(difference: int) -> str:
    """Stored above the truth (Redis above PostgreSQL) reads high."""
    return "high" if difference > 0 else "low"


def table_difference(row: TableDrift) -> str:
    """A drifted row of Cuebot's tables in words: '4.00 cores high', '2.50 cores low, 2 GPUs high'."""
    words = []
    if row.cores_difference:
        words.append(cores_words(row.cores_difference))
    if row.gpus_difference:
        words.append(gpus_words(row.gpus_difference))
    return ", ".join(words)


def redis_difference(row: DriftRow) -> tuple[int | None, int | None, str]:
    """A drifted Redis field's difference: in centicores if it holds cores, in GPUs if it holds
    GPUs (None otherwise), and in words."""
    if row.redis is None:
        return None, None, f"missing from Redis (PostgreSQL {row.pg})"
    if UNLIMITED in (row.redis, row.pg) and row.field not in BOOKED_FIELDS:
        # A limit unlimited on one side has no difference in cores.
        return None, None, f"Redis {_limit(row.redis)}, PostgreSQL {_limit(row.pg)}"
    if row.field in REDIS_CORE_FIELDS:
        return row.difference * 100, None, cores_words(row.difference * 100)
    if row.field in REDIS_GPU_FIELDS:
        return None, row.difference, gpus_words(row.difference)
    return None, None, f"{abs(row.difference)} {_direction(row.difference)}"


def seen_in_tables(row: TableDrift, *, show_name: str) -> Seen:
    return Seen(
        identity=table_identity(row),
        show_id=row.show_id,
        show_name=show_name,
        subject=row.name,
        detail=f"{row.table} ({row.columns})",
        cores_difference=row.cores_difference,
        gpus_difference=row.gpus_difference,
        difference=table_difference(row),
    )


def seen_in_redis(row: DriftRow, *, show_id: str, show_name: str) -> Seen:
    cores, gpus, words = redis_difference(row)
    return Seen(
        identity=redis_identity(key=row.key, field=row.field),
        show_id=show_id,
        show_name=show_name,
        subject=row.key,
        detail=row.field,
        cores_difference=cores,
        gpus_difference=gpus,
        difference=words,
    )


def _limit(value: int) -> str:
    return "unlimited" if value == UNLIMITED else str(value)


# What a later check may find changed of a row already recorded (first_seen never changes).
_KEPT_FRESH = ("show_id", "show_name", "subject", "detail", "cores_difference", "gpus_difference", "difference")


@dataclass(frozen=True)
class _Plan:
    """What a check must write to make a source's records say what it found."""

    first_seen: dict[str, datetime]  # identity -> first sighting, of the rows recorded already
    fresh: list[Seen]  # rows first seen
    changed: list[DriftRecord]  # records whose row says something else now (pk and the fields)
    gone: list[int]  # pks of records whose row is back at its sum

    @property
    def writes(self) -> bool:
        return bool(self.fresh or self.changed or self.gone)


def _plan(*, source: str, found: dict[str, Seen]) -> _Plan:
    first_seen, changed, gone = {}, [], []
    for pk, identity, first, *kept in DriftRecord.objects.filter(source=source).values_list(
        "pk", "identity", "first_seen", *_KEPT_FRESH
    ):
        row = found.get(identity)
        if row is None:
            gone.append(pk)
            continue
        first_seen[identity] = first
        current = [getattr(row, name) for name in _KEPT_FRESH]
        if kept != current:
            changed.append(DriftRecord(pk=pk, **dict(zip(_KEPT_FRESH, current, strict=True))))
    fresh = [row for identity, row in found.items() if identity not in first_seen]
    return _Plan(first_seen=first_seen, fresh=fresh, changed=changed, gone=gone)


def record_drift(*, source: str, seen: Sequence[Seen], checked_at: datetime) -> dict[str, float]:
    """What one check of `source` found: a record made for each row in `seen` not recorded yet
    (first seen at `checked_at`), one already recorded kept (its first sighting with it) and
    rewritten only if what it says changed, every other record of the source deleted. Returns,
    per show with a drifted row, the age at `checked_at` of its oldest, in seconds.

    It reads the source's records and writes only the differences, so drift that stays put
    (or none) costs that one read per check. Writes happen under the source's lock, after
    reading again under it (another check may have written since)."""
    found = {row.identity: row for row in seen}
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
    for identity, row in found.items():
        first = plan.first_seen.get(identity, checked_at)
        oldest[row.show_id] = min(first, oldest.get(row.show_id, first))
    return {show_id: (checked_at - first).total_seconds() for show_id, first in oldest.items()}


# Rows first seen, one array per column: bulk_create's VALUES list (ten parameters a row) took
# twice as long for 100 rows, an eighth of the check at Maestro's size (docs/benchmarks.md).
_INSERT = """
INSERT INTO {table} (source, first_seen, identity, {kept})
SELECT %s, %s, * FROM unnest(%s::text[], {arrays})"""
_ARRAY_TYPES = {"cores_difference": "bigint[]", "gpus_difference": "bigint[]"}


def _insert(*, source: str, rows: Sequence[Seen], first_seen: datetime) -> None:
    sql = _INSERT.format(
        table=connection.ops.quote_name(DriftRecord._meta.db_table),
        kept=", ".join(_KEPT_FRESH),
        arrays=", ".join(f"%s::{_ARRAY_TYPES.get(name, 'text[]')}" for name in _KEPT_FRESH),
    )
    columns = [[row.identity for row in rows], *([getattr(row, name) for row in rows] for name in _KEPT_FRESH)]
    with connection.cursor() as cursor:
        cursor.execute(sql, [source, first_seen, *columns])


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
