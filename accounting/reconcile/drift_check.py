"""The periodic drift checks: Cuebot's own tables in every era, Redis in the redis era; counted and exported.

run_table_drift_check: the rows of Cuebot's five tables that differ from SUM(proc), for the
shows Cuebot owns (every show in the Maestro era), in one read-only statement; it sets
cuebot_acct_cuebot_table_drift_rows{show} and its timestamp and records the result under
TABLES_STATUS_KEY. A show Cuebot no longer owns is set to 0, as below. It needs no Redis but
the cache.

run_drift_check: every scheduler-managed show's Redis drift.

It runs on its own schedule (`acct-drift-check`, accounting.tasks), whether or not this
service reconciles (ACCOUNTING_RECONCILE_ENABLED): drift is worth an alert whoever heals it,
the scheduler's own reseed loops included. Read-only on Cuebot's tables and on Redis (it
writes only its own record of drift), so it takes no reseed lock.

Each run sets cuebot_acct_drift_fields{show} and cuebot_acct_drift_last_check_timestamp_seconds
and records the result in the cache (STATUS_KEY), where every web process reads it for the
admin's overview. A show that is no longer scheduler-managed is set to 0, so its series
does not keep a stale count. When Redis cannot be read the run records the error and
leaves the timestamp as it was: a check that did not happen must not look recent.

Each check also hands the rows it found drifted to accounting.reconcile.drift_history, which
keeps when each was first seen (the service's own table, never Cuebot's: the check writes no
Cuebot table) and deletes the record of a row back at its sum; per show, the age of its oldest
drifted row at the check is cuebot_acct_drift_age_seconds{show,source} (0: none), for an alert
on drift that outlives a repair rather than on first sight. A check that failed leaves the
records as they were.
"""

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from django.core.cache import cache

from accounting.models import DriftRecord
from accounting.reconcile.cuebot_drift import cuebot_owned_show_ids, cuebot_table_drift
from accounting.reconcile.drift import drift_report
from accounting.reconcile.drift_history import Seen, record_drift, seen_in_redis, seen_in_tables
from cuebot_acct import metrics
from shows.models import Show

logger = logging.getLogger(__name__)

STATUS_KEY = "acct-drift-status"
TABLES_STATUS_KEY = "acct-table-drift-status"


@dataclass(frozen=True)
class DriftCheck:
    checked_at: float
    fields_drifted: dict[str, int]  # show name -> fields
    error: str | None = None


def run_drift_check() -> DriftCheck:
    started = time.time()
    previous = cache.get(STATUS_KEY) or {}
    status: dict[str, dict] = {}
    seen: list[Seen] = []
    try:
        for show_id, name in (
            Show.objects.filter(b_scheduler_managed=True).order_by("str_name").values_list("pk", "str_name")
        ):
            report = drift_report(show_ids=[show_id])
            status[show_id] = {"name": name, "fields": len(report.rows), "checked": report.fields_checked}
            seen += [seen_in_redis(row, show_id=show_id, show_name=name) for row in report.rows]
    except (redis.RedisError, OSError) as error:
        logger.warning("drift check could not read the accounting Redis: %s", error)
        cache.set(
            STATUS_KEY, {**previous, "error": f"{type(error).__name__}: {error}", "failed_at": started}, timeout=None
        )
        return DriftCheck(checked_at=started, fields_drifted={}, error=str(error))
    ages = record_drift(source=DriftRecord.Source.REDIS, seen=seen, checked_at=datetime.fromtimestamp(started, UTC))
    _record(
        key=STATUS_KEY,
        status=status,
        previous=previous.get("shows", {}),
        count="fields",
        gauge=metrics.DRIFT_FIELDS,
        last_check=metrics.DRIFT_LAST_CHECK,
        started=started,
        ages=ages,
        source=DriftRecord.Source.REDIS,
    )
    drifted = {entry["name"]: entry["fields"] for entry in status.values() if entry["fields"]}
    if drifted:
        logger.warning(
            "drift check: Redis differs from PostgreSQL in %s",
            ", ".join(f"{n} ({f} fields)" for n, f in drifted.items()),
        )
    return DriftCheck(checked_at=started, fields_drifted={entry["name"]: entry["fields"] for entry in status.values()})


def _record(
    *,
    key: str,
    status: dict[str, dict],
    previous: dict[str, dict],
    count: str,
    gauge,
    last_check,
    started: float,
    ages: dict[str, float],
    source: str,
) -> None:
    """A check's result for the faces that read it later: per show its `count` on the gauge and
    the age of its oldest drifted row on the age gauge (0 for a show the last check had and this
    one has not, so its series do not stay up), the time of the check, and the status in the
    shared cache (every process's admin reads it)."""
    for show_id, entry in previous.items():
        if show_id not in status:
            gauge.labels(show=entry["name"]).set(0)
            metrics.DRIFT_AGE.labels(show=entry["name"], source=source).set(0)
    for show_id, entry in status.items():
        gauge.labels(show=entry["name"]).set(entry[count])
        metrics.DRIFT_AGE.labels(show=entry["name"], source=source).set(ages.get(show_id, 0))
    last_check.set(started)
    cache.set(key, {"checked_at": started, "shows": status}, timeout=None)


@dataclass(frozen=True)
class TableDriftCheck:
    checked_at: float
    rows_drifted: dict[str, int]  # show name -> rows, every show Cuebot owns


def run_table_drift_check() -> TableDriftCheck:
    started = time.time()
    owned = cuebot_owned_show_ids()
    shows = Show.objects.all() if owned is None else Show.objects.filter(pk__in=owned)
    names = dict(shows.values_list("pk", "str_name"))
    report = cuebot_table_drift()
    drifted = report.rows_by_show()
    status = {pk: {"name": name, "rows": drifted.get(pk, 0)} for pk, name in names.items()}
    ages = record_drift(
        source=DriftRecord.Source.CUEBOT_TABLES,
        seen=[seen_in_tables(row, show_name=names.get(row.show_id, row.show_id)) for row in report.rows],
        checked_at=datetime.fromtimestamp(started, UTC),
    )
    _record(
        key=TABLES_STATUS_KEY,
        status=status,
        previous=(cache.get(TABLES_STATUS_KEY) or {}).get("shows", {}),
        count="rows",
        gauge=metrics.CUEBOT_TABLE_DRIFT_ROWS,
        last_check=metrics.CUEBOT_TABLE_DRIFT_LAST_CHECK,
        started=started,
        ages=ages,
        source=DriftRecord.Source.CUEBOT_TABLES,
    )
    found = {entry["name"]: entry["rows"] for entry in status.values() if entry["rows"]}
    if found:
        logger.warning(
            "drift check: Cuebot's tables differ from SUM(proc) in %s (manage.py acct_drift names the rows)",
            ", ".join(f"{name} ({rows} rows)" for name, rows in sorted(found.items())),
        )
    return TableDriftCheck(checked_at=started, rows_drifted={entry["name"]: entry["rows"] for entry in status.values()})
