"""Drift as the faces read it: the periodic checks' last results, how long each drifted row has
drifted, the rows they recorded, and the command that repairs Cuebot's tables."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from accounting.models import DriftRecord
from accounting.operators.names import field_label, key_labels
from accounting.reconcile.cuebot_drift import TableDrift, TableDriftReport
from accounting.reconcile.drift import DriftReport, DriftRow
from accounting.reconcile.drift_check import STATUS_KEY, TABLES_STATUS_KEY
from accounting.reconcile.drift_history import redis_difference, redis_identity, table_difference, table_identity
from cuebot_acct.schedulers import cuebot_owns_every_show


def labelled_drift(*, report: dict) -> dict:
    """A drift report's dict with each row's key named (show / allocation, folder, job, ...) and
    its field labelled (`"field": "int_cores", "label": "cores booked"`), in every list of rows."""
    lists = ("rows", "rounding_only", "explained")
    labels = key_labels(redis_keys={row["key"] for name in lists for row in report[name]})
    return {
        **report,
        **{
            name: [
                {**row, "names": labels.get(row["key"]), "label": field_label(key=row["key"], field=row["field"])}
                for row in report[name]
            ]
            for name in lists
        },
    }


# --- The drift check's last results (accounting.reconcile.drift_check) -----------------------------


@dataclass(frozen=True)
class ShowDrift:
    fields: int
    checked: int


@dataclass(frozen=True)
class DriftStatus:
    checked_at: datetime | None
    shows: dict[str, ShowDrift]  # by show id
    error: str | None = None
    failed_at: datetime | None = None


def _time(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def drift_status() -> DriftStatus:
    stored = cache.get(STATUS_KEY) or {}
    return DriftStatus(
        checked_at=_time(stored.get("checked_at")),
        shows={pk: ShowDrift(fields=e["fields"], checked=e["checked"]) for pk, e in stored.get("shows", {}).items()},
        error=stored.get("error"),
        failed_at=_time(stored.get("failed_at")),
    )


@dataclass(frozen=True)
class TableDriftStatus:
    checked_at: datetime | None
    shows: dict[str, int]  # show id -> rows of Cuebot's tables drifted, every show Cuebot owns


def table_drift_status() -> TableDriftStatus:
    """The last check of Cuebot's own tables (accounting.reconcile.drift_check.run_table_drift_check)."""
    stored = cache.get(TABLES_STATUS_KEY) or {}
    return TableDriftStatus(
        checked_at=_time(stored.get("checked_at")), shows={pk: e["rows"] for pk, e in stored.get("shows", {}).items()}
    )


# --- How long each drifted row has drifted (accounting.reconcile.drift_history) -------------------


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

    def sentence(self, *, difference: str) -> str:
        return f"{difference} since {self.since} ({self.age})"


NOT_SEEN_YET = "not seen drifted by the periodic check yet"


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


def drift_sentence(*, difference: str, age: DriftAge | None) -> str:
    """'4.00 cores high since 03:12 UTC (2 h 5 min)', the words every face says of a drifted row."""
    return age.sentence(difference=difference) if age else f"{difference}, {NOT_SEEN_YET}"


def drift_age_fields(*, difference: str, age: DriftAge | None) -> dict:
    """What the API and acct_drift --json add to a drifted row (nulls: no check has seen it yet)."""
    return {
        "first_seen": age.first_seen.isoformat() if age else None,
        "age_seconds": age.seconds if age else None,
        "since": drift_sentence(difference=difference, age=age),
    }


def _ages(*, source: str, identities: list[str], now: datetime) -> list[DriftAge | None]:
    """Per identity, in order, its time drifted up to `now` if the periodic check has recorded it."""
    first = (
        dict(DriftRecord.objects.filter(source=source, identity__in=identities).values_list("identity", "first_seen"))
        if identities
        else {}
    )
    return [DriftAge(first_seen=first[i], seen=now) if i in first else None for i in identities]


def table_row_ages(*, rows: Sequence[TableDrift], now: datetime) -> list[DriftAge | None]:
    """For rows of Cuebot's tables read drifted at `now`: how long each has drifted (None: no check saw it yet)."""
    return _ages(source=DriftRecord.Source.CUEBOT_TABLES, identities=[table_identity(r) for r in rows], now=now)


def redis_row_ages(*, rows: Sequence[DriftRow], now: datetime) -> list[DriftAge | None]:
    """The same for Redis fields read drifted at `now`."""
    identities = [redis_identity(key=r.key, field=r.field) for r in rows]
    return _ages(source=DriftRecord.Source.REDIS, identities=identities, now=now)


def aged_table_drift(*, report: TableDriftReport, now: datetime) -> dict:
    """A live report of Cuebot's tables as the API and acct_drift --json give it: each row with its
    first sighting, its age and the sentence every face says."""
    ages = table_row_ages(rows=report.rows, now=now)
    return {
        **report.as_dict(),
        "rows": [
            {**row.as_dict(), **drift_age_fields(difference=table_difference(row), age=age)}
            for row, age in zip(report.rows, ages, strict=True)
        ],
    }


def aged_redis_drift(*, report: DriftReport, now: datetime) -> dict:
    """labelled_drift of a live Redis report, each drifted row with its first sighting and age."""
    labelled = labelled_drift(report=report.as_dict())
    ages = redis_row_ages(rows=report.rows, now=now)
    labelled["rows"] = [
        {**entry, **drift_age_fields(difference=redis_difference(row)[2], age=age)}
        for entry, row, age in zip(labelled["rows"], report.rows, ages, strict=True)
    ]
    return labelled


@dataclass(frozen=True)
class RecordedDrift:
    """A row the last check found drifted, named for people (Redis keys and fields labelled)."""

    source: str
    show: str
    show_id: str
    subject: str
    detail: str
    difference: str
    age: DriftAge

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "show": self.show,
            "show_id": self.show_id,
            "name": self.subject,
            "what": self.detail,
            "difference": self.difference,
            **drift_age_fields(difference=self.difference, age=self.age),
            "checked_at": self.age.seen.isoformat(),
        }


def recorded_drift() -> list[RecordedDrift]:
    """Every row the last checks found drifted, oldest first, its age as of the last check of its
    source (which saw it drifted; now if the cache has lost when that was)."""
    now = timezone.now()
    checked = {
        DriftRecord.Source.CUEBOT_TABLES: table_drift_status().checked_at or now,
        DriftRecord.Source.REDIS: drift_status().checked_at or now,
    }
    records = list(DriftRecord.objects.order_by("first_seen", "show_name", "subject", "detail"))
    redis = [r for r in records if r.source == DriftRecord.Source.REDIS]
    labels = key_labels(redis_keys={r.subject for r in redis})
    found = []
    for record in records:
        is_redis = record.source == DriftRecord.Source.REDIS
        found.append(
            RecordedDrift(
                source=record.source,
                show=record.show_name,
                show_id=record.show_id,
                subject=labels.get(record.subject, record.subject) if is_redis else record.subject,
                detail=f"{field_label(key=record.subject, field=record.detail)} ({record.detail})"
                if is_redis
                else record.detail,
                difference=record.difference,
                age=DriftAge(first_seen=record.first_seen, seen=checked[DriftRecord.Source(record.source)]),
            )
        )
    return found


def table_repair(*, show: str | None) -> str:
    """What repairs drift of Cuebot's tables in this era, as a command to type; every face says the
    same, and on an observer that it needs writes on first."""
    if show:
        command = f"manage.py acct_reseed --show {show}"
    else:
        # Outside the Maestro era acct_reseed alone rebuilds the scheduler-managed shows' Redis.
        command = "manage.py acct_reseed" if cuebot_owns_every_show() else "manage.py acct_reseed --cuebot-tables"
    return command if settings.ACCOUNTING_WRITES else f"{command} (where ACCOUNTING_WRITES is on)"
