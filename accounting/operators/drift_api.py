"""Drift and lock endpoints under /api/v1/: Cuebot's tables and Redis against SUM(proc), and the
named locks held."""

import threading
from typing import Any

from django.utils import timezone
from ninja import Router
from ninja.errors import HttpError

from accounting.live.leases import held_locks
from accounting.operators.auth import BearerToken
from accounting.operators.drift_views import last_checks_json, live_json
from accounting.operators.shows_api import show_or_404
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS_LOCK, advisory_lock_holder
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.tables_against_procs import cuebot_table_drift
from infra.api_types import AUTH_ERRORS, LOOKUP_ERRORS, DbText, ErrorOut
from infra.era import era
from infra.permissions import VIEW_ACCOUNTING

router = Router(tags=["accounting"])


# A live drift report reads every key of a show from Redis and SUM(proc) from PostgreSQL:
# one show per request, one at a time per process, so readers cannot slow the release path
# (eight loops on the farm-wide report took release p99 from 10 to 162 ms). The farm-wide
# view is the periodic drift check's last result, computed once for every reader.
_live_drift = threading.Lock()


@router.get(
    "/accounting/drift",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: dict[str, Any], 409: ErrorOut, 429: ErrorOut, **LOOKUP_ERRORS, **AUTH_ERRORS},
    summary="Cuebot's tables against SUM(proc), and Redis against PostgreSQL: one show live, or every show "
    "as of the last drift check",
    description=f"Needs the permission {VIEW_ACCOUNTING}. With `show`, read now (one such report at a time "
    "per process: 429 while another runs): `cuebot_tables`, the rows of Cuebot's five tables that "
    "differ from SUM(proc) if Cuebot owns the show's rows (every show in the Maestro era), each "
    "named (`show / allocation`, `show / folder`, `job`, `job / layer`, `show / department`) with "
    "stored, true and difference in cores (a number, 2.5 for a fractional one) and GPUs, and "
    "`repair`, the command that repairs them; in the redis era also that show's Redis keys and "
    "fields beside it. Each drifted row carries `first_seen` (the first periodic check that saw it "
    'drifted), `age_seconds` (from then to now) and `since` ("4.00 cores high since 03:12 UTC (2 h 5 '
    'min)"); null and "not seen drifted by the periodic check yet" for a row no check has seen. '
    "Without, the periodic drift check's last result per show: "
    "`cuebot_tables.shows` (rows drifted), and the Redis fields per scheduler-managed show "
    "in the redis era; and `drifted_rows`, every row the last checks found drifted, oldest first, "
    "each with its `first_seen`, `checked_at` (the last check of its source, which saw it) and `age_seconds` "
    "between them.",
)
def accounting_drift(request, show: DbText | None = None):
    if show is None:
        return last_checks_json()
    found = show_or_404(show)
    if not _live_drift.acquire(blocking=False):
        raise HttpError(429, "a live drift report is being computed by this process; retry in a second")
    try:
        redis = drift_report(show_ids=[found.id]) if era().keeps_redis else None
        tables = cuebot_table_drift(show_ids=[found.id])
        return live_json(tables=tables, redis=redis, now=timezone.now(), show=found.str_name)
    finally:
        _live_drift.release()


@router.get(
    "/locks",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: list[dict[str, Any]], **AUTH_ERRORS},
    summary="Named locks currently held",
    description=f"Needs the permission {VIEW_ACCOUNTING}. The Redis leases where there is an accounting Redis "
    "(`ttl_ms`, the time left), and recalculate_subs's PostgreSQL lock where there is none (`ttl_ms` null: it "
    "ends with its holder's transaction; `owner` names the backend).",
)
def locks(request):
    leases = held_locks() if era().keeps_redis else []
    found = [{"name": lease.name, "owner": lease.owner, "ttl_ms": lease.ttl_ms} for lease in leases]
    if (pid := advisory_lock_holder()) is not None:
        found.append({"name": RECALCULATE_SUBS_LOCK, "owner": f"PostgreSQL backend {pid}", "ttl_ms": None})
    return sorted(found, key=lambda lock: lock["name"])
