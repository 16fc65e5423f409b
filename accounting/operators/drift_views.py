"""Drift as every face shows it (the pages, the API, acct_drift): rows of either source named by
their source, with how long each has drifted; a live report of a show, or of the farm; the
checks' last results and the rows they recorded; and the command that repairs Cuebot's tables."""

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from django.utils import timezone

from accounting.live.units import signed_cores
from accounting.models import DriftRecord
from accounting.operators.names import field_label, key_labels
from accounting.reconcile.drift_check import SOURCES, DriftSource, ShowCount, check_status, era_sources
from accounting.reconcile.drift_history import DriftAge, Drifted, Shown, ages, recorded
from accounting.reconcile.recompute import TABLE_REPAIR
from accounting.reconcile.redis_against_pg import REDIS_FIELDS, DriftReport, DriftRow, drifted_field
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES, TableDrift, TableDriftReport, drifted_table_row
from infra.era import era
from shows.models import Show


def named_fields(rows: Sequence[Drifted]) -> list[Shown]:
    """Redis fields: each key named (show / allocation, job, ...) and each field labelled, the raw
    field kept beside its label for scripts and for HGET."""
    labels = key_labels(redis_keys={row.subject for row in rows})
    found = []
    for row in rows:
        name, label = labels.get(row.subject, row.subject), field_label(key=row.subject, field=row.detail)
        numbers: dict[str, Any] = {}
        if (raw := row.raw) is not None:
            cause = f"\tcause: {raw.cause}" if raw.cause else ""
            numbers = {
                "values": {**asdict(raw), "names": labels.get(row.subject), "label": label},
                "numbers": f"redis={raw.redis}\tpg={raw.pg}\tdiff={raw.difference:+d}{cause}",
                "ref": row.subject,
            }
        found.append(Shown(row=row, name=name, what=f"{label} ({row.detail})", **numbers))
    return found


def named_table_rows(rows: Sequence[Drifted]) -> list[Shown]:
    """Rows of Cuebot's tables, each as its name says it (show / allocation, job / layer, ...), its
    numbers in cores."""
    return [Shown(row=row, name=row.subject, what=row.detail, **(_numbers(row.raw) if row.raw else {})) for row in rows]


def _numbers(raw: TableDrift) -> dict:
    cores = f"stored={signed_cores(raw.stored_cores)} true={signed_cores(raw.true_cores)} diff={signed_cores(raw.cores_difference):+}"
    gpus = f"stored={raw.stored_gpus} true={raw.true_gpus} diff={raw.gpus_difference:+d}"
    return {"values": raw.as_dict(), "numbers": f"cores {cores}\tgpus {gpus}", "ref": raw.pk}


# How the faces name each source's rows.
NAMED: dict[str, Callable[[Sequence[Drifted]], list[Shown]]] = {
    DriftRecord.Source.REDIS: named_fields,
    DriftRecord.Source.CUEBOT_TABLES: named_table_rows,
}


def shown(rows: Sequence[Drifted], *, now: datetime | None = None) -> list[Shown]:
    """The rows named as their sources' rows are named and, read drifted at `now`, aged."""
    named: dict[int, Shown] = {}
    for source in {row.source for row in rows}:
        mine = [i for i, row in enumerate(rows) if row.source == source]
        named |= dict(zip(mine, NAMED[source]([rows[i] for i in mine]), strict=True))
    found = ages(rows, now=now) if now is not None else [None] * len(rows)
    return [replace(named[i], age=age) for i, age in enumerate(found)]


def redis_shown(rows: Sequence[DriftRow], *, now: datetime | None = None) -> list[Shown]:
    return shown([drifted_field(row, show_id="") for row in rows], now=now)


def table_shown(report: TableDriftReport, *, now: datetime) -> list[Shown]:
    return shown([drifted_table_row(row) for row in report.rows], now=now)


def live_json(*, tables: TableDriftReport, redis: DriftReport | None, now: datetime, show: str | None) -> dict:
    """A live report as the API and acct_drift --json give it: in the redis era the Redis fields
    (every list named, the drifted rows aged), and Cuebot's tables with the command that repairs them."""
    found = {}
    if redis is not None:
        found = {
            **redis.as_dict(),
            "rows": [entry.as_dict() for entry in redis_shown(redis.rows, now=now)],
            "rounding_only": [entry.values for entry in redis_shown(redis.rounding_only)],
            "explained": [entry.values for entry in redis_shown(redis.explained)],
        }
    rows = [entry.as_dict() for entry in table_shown(tables, now=now)]
    return {**found, "cuebot_tables": {**tables.as_dict(), "rows": rows, "repair": table_repair(show=show)}}


@dataclass(frozen=True)
class RecordedDrift:
    """A row the last check of its source found drifted, named as the faces name it."""

    show: str
    entry: Shown

    def as_dict(self) -> dict:
        row, age = self.entry.row, self.entry.age
        assert age is not None  # a recorded row's age runs to the last check that saw it
        return {
            "source": row.source,
            "show": self.show,
            "show_id": row.show_id,
            "name": self.entry.name,
            "what": self.entry.what,
            "difference": row.difference,
            **self.entry.as_dict(),
            "checked_at": age.seen.isoformat(),
        }


def recorded_drift() -> list[RecordedDrift]:
    """Every row the last checks found drifted, oldest first, its age as of the last check of its
    source (which saw it drifted; now if the cache has lost when that was)."""
    now = timezone.now()
    checked = {name: check_status(source).checked_at or now for name, source in SOURCES.items()}
    records = recorded()
    entries = shown([row for row, _, _ in records])
    return [
        RecordedDrift(show=show, entry=replace(entry, age=DriftAge(first, checked[row.source])))
        for (row, show, first), entry in zip(records, entries, strict=True)
    ]


def last_checks_json() -> dict:
    """The farm as of the periodic checks, as the API gives it: per show its rows drifted at each
    source's last check (the Redis fields at the top, in the redis era), and every row recorded."""
    statuses = {source: check_status(source) for source in era_sources()}
    shows = {pk for status in statuses.values() for pk in status.shows}
    names = dict(Show.objects.filter(pk__in=shows).values_list("pk", "str_name"))

    def part(source: DriftSource, counts: Callable[[ShowCount], dict]) -> dict:
        status = statuses[source]
        return {
            "checked_at": status.checked_at.isoformat() if status.checked_at else None,
            "error": status.error,
            "shows": [
                {"show": names.get(pk, pk), "show_id": pk, **counts(count)}
                for pk, count in sorted(status.shows.items(), key=lambda item: names.get(item[0], item[0]))
            ],
        }

    body = {"source": "the periodic drift check (acct-drift-check); ask ?show=NAME for one show now"}
    if REDIS_FIELDS in statuses:
        body |= part(REDIS_FIELDS, lambda count: {"fields_drifted": count.drifted, "fields_checked": count.checked})
    tables = part(CUEBOT_TABLES, lambda count: {"rows_drifted": count.drifted})
    return {**body, "cuebot_tables": tables, "drifted_rows": [row.as_dict() for row in recorded_drift()]}


def table_repair(*, show: str | None) -> str:
    """What repairs drift of Cuebot's tables in this era, as a command to type; every face says the
    same, and on an observer that it needs writes on first."""
    if show:
        command = f"manage.py acct_reseed --show {show}"
    else:
        # Outside the Maestro era acct_reseed alone rebuilds the scheduler-managed shows' Redis.
        command = "manage.py acct_reseed" if era().cuebot_owns_every_show else "manage.py acct_reseed --cuebot-tables"
    return command if TABLE_REPAIR.allowed else f"{command} (where ACCOUNTING_WRITES is on)"
