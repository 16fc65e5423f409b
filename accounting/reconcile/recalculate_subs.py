"""recalculate_subs: Cuebot's 2-hourly subscription recompute, aware of who owns each show in each era."""

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field

from django.db import connection, transaction

from accounting.live.leases import LockBusy, named_lock
from accounting.reconcile.recompute import (
    RowFailure,
    report_row_failures,
    restore_moved_caps,
    run_row_by_row_on_failure,
)
from accounting.reconcile.recompute_sql import RESTORE_BURSTS
from infra import metrics
from infra.era import era
from infra.writes import Write
from shows.attach import writer_grant

logger = logging.getLogger(__name__)

RECALCULATE_SUBS_LOCK = "recalculate_subs"
RECALCULATE_SUBS = Write(action="recalculate_subs", grant=writer_grant("subscription"))

# Subscriptions of the shows Cuebot owns whose int_cores/int_gpus differ from SUM(proc) of
# their non-local procs (allocation through the proc's host). Outside the Maestro era
# scheduler-managed shows are left out by the WHERE itself, so their rows are never touched,
# and FOR SHARE holds the Cuebot shows' rows until the statement ends: a toggle that commits
# meanwhile waits, and one that committed first is re-read, so a show that just became
# scheduler-managed is excluded too. In the Maestro era Cuebot owns every show whatever its
# flag (nothing else re-derives a flagged show's rows any more), so no show is filtered out
# and no proc is tested against a list of shows.
_SUBSCRIPTION_DRIFT = """
WITH cuebot_shows AS (
        SELECT pk_show, str_name FROM show {owned}
     ),
     booked AS (
        SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p
          JOIN host h ON h.pk_host = p.pk_host
         WHERE NOT p.b_local {procs}
         GROUP BY p.pk_show, h.pk_alloc
     )
SELECT s.pk_subscription, c.str_name AS show_name, a.str_name AS alloc_name,
       s.int_cores AS old_cores, s.int_gpus AS old_gpus, s.int_burst AS old_burst,
       COALESCE(b.cores, 0) AS new_cores, COALESCE(b.gpus, 0) AS new_gpus
  FROM subscription s
  JOIN cuebot_shows c ON c.pk_show = s.pk_show
  JOIN alloc a ON a.pk_alloc = s.pk_alloc
  LEFT JOIN booked b ON b.pk_show = s.pk_show AND b.pk_alloc = s.pk_alloc
 WHERE ((s.int_cores::bigint, s.int_gpus::bigint) IS DISTINCT FROM (COALESCE(b.cores, 0), COALESCE(b.gpus, 0))
        -- a row never updated since its INSERT has no tier yet; Cuebot's recompute gives it one
        OR s.float_tier IS DISTINCT FROM tier(COALESCE(b.cores, 0), s.int_size)::numeric(16, 2))
   AND (%(only)s::text IS NULL OR s.pk_subscription = %(only)s)
"""


# By era().cuebot_owns_every_show. Outside the Maestro era the shows are filtered at the proc scan
# (the array is computed once), so only Cuebot-managed procs are joined to their host. A dry run
# writes nothing, so it holds no show (and needs no more than SELECT, as an observer has).
def _subscription_drift(*, every_show: bool, writing: bool) -> str:
    if every_show:
        return _SUBSCRIPTION_DRIFT.format(owned="", procs="")
    return _SUBSCRIPTION_DRIFT.format(
        owned="WHERE NOT b_scheduler_managed" + (" FOR SHARE" if writing else ""),
        procs="AND p.pk_show = ANY(ARRAY(SELECT pk_show FROM cuebot_shows))",
    )


# A row legitimately above its burst gets its true SUM(proc) too: the burst moves in the
# same UPDATE and back afterwards (accounting.reconcile.recompute explains the trick).
FIX_SUBSCRIPTIONS = {
    every_show: f"""
WITH drift AS ({_subscription_drift(every_show=every_show, writing=True)})
UPDATE subscription s
   SET int_cores = d.new_cores, int_gpus = d.new_gpus,
       int_burst = CASE WHEN d.new_cores > s.int_cores AND d.new_cores > s.int_burst THEN -s.int_burst - 1 ELSE s.int_burst END
  FROM drift d
 WHERE s.pk_subscription = d.pk_subscription
RETURNING d.show_name, d.alloc_name, d.old_cores, d.old_gpus, d.new_cores, d.new_gpus, s.pk_subscription,
          d.new_cores > d.old_cores AND d.new_cores > d.old_burst
"""
    for every_show in (False, True)
}

SHOW_DRIFT = {
    every_show: f"""
WITH drift AS ({_subscription_drift(every_show=every_show, writing=False)})
SELECT d.show_name, d.alloc_name, d.old_cores, d.old_gpus, d.new_cores, d.new_gpus, d.pk_subscription FROM drift d
"""
    for every_show in (False, True)
}


@dataclass(frozen=True)
class SubscriptionChange:
    show: str
    alloc: str
    old_cores: int  # centicores, as stored
    old_gpus: int
    new_cores: int
    new_gpus: int


@dataclass(frozen=True)
class RecalculateSubsResult:
    changes: list[SubscriptionChange]
    ran: bool  # False: another instance held the lock, nothing was read or written
    dry_run: bool
    failures: list[RowFailure] = field(default_factory=list)  # rows left as they were


# The rows recalculate_subs may write, for redoing it row by row.
CUEBOT_MANAGED_SUBSCRIPTIONS = """
SELECT s.pk_subscription FROM subscription s JOIN show c ON c.pk_show = s.pk_show
 WHERE %(every_show)s OR NOT c.b_scheduler_managed ORDER BY s.pk_subscription
"""


def _read_drift(cursor, *, every_show: bool) -> list[tuple]:
    cursor.execute(SHOW_DRIFT[every_show], {"only": None})
    return cursor.fetchall()


def _cuebot_managed_subscriptions(cursor, *, every_show: bool) -> list[str]:
    cursor.execute(CUEBOT_MANAGED_SUBSCRIPTIONS, {"every_show": every_show})
    return [pk for (pk,) in cursor.fetchall()]


def _fix_drift(cursor, only: str | None, *, every_show: bool) -> list[tuple]:
    cursor.execute(FIX_SUBSCRIPTIONS[every_show], {"only": only})
    rows = cursor.fetchall()
    restore_moved_caps(cursor=cursor, restore=RESTORE_BURSTS, moved=[row[6:] for row in rows])
    return rows


# The run's advisory lock as pg_locks shows it: hashtext's int4 taken as the bigint key,
# which PostgreSQL splits into classid (high 32 bits) and objid (low 32 bits), objsubid 1.
ADVISORY_LOCK_HOLDER = """
SELECT pid FROM pg_locks
 WHERE locktype = 'advisory' AND granted AND objsubid = 1
   AND ((classid::bigint << 32) | objid::bigint) = hashtext(%s)::bigint
"""


def advisory_lock_holder() -> int | None:
    """The backend pid of the run holding the PostgreSQL lock (the eras without an accounting
    Redis), or None."""
    with connection.cursor() as cursor:
        cursor.execute(ADVISORY_LOCK_HOLDER, [RECALCULATE_SUBS_LOCK])
        row = cursor.fetchone()
    return row[0] if row else None


def _drift(*, dry_run: bool, every_show: bool, pg_lock: bool) -> tuple[list[SubscriptionChange], list[RowFailure]]:
    with transaction.atomic(), connection.cursor() as cursor:
        if pg_lock:
            # Without an accounting Redis (the Maestro and notify eras), where the redis era's
            # lease lives, the lock is PostgreSQL's, for this transaction.
            cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [RECALCULATE_SUBS_LOCK])
            if not cursor.fetchone()[0]:
                raise LockBusy(RECALCULATE_SUBS_LOCK)
        # JIT compilation cost more than the aggregate it would speed up, on every run.
        cursor.execute("SET LOCAL jit = off")
        failures: list[RowFailure]
        if dry_run:
            rows, failures = _read_drift(cursor, every_show=every_show), []
        else:
            rows, failures = run_row_by_row_on_failure(
                table="subscription",
                run=lambda only: _fix_drift(cursor, only, every_show=every_show),
                keys=lambda: _cuebot_managed_subscriptions(cursor, every_show=every_show),
            )
    changes = [SubscriptionChange(*row[:6]) for row in rows]
    return sorted(changes, key=lambda change: (change.show, change.alloc)), failures


def recalculate_subs(*, dry_run: bool = False) -> RecalculateSubsResult:
    """Make the subscription int_cores/int_gpus of the shows Cuebot owns (every show in the
    Maestro era, the Cuebot-managed ones otherwise) equal SUM(proc), in one statement.

    One instance at a time, fleet-wide: a run that finds the lock held skips (ran=False).
    A dry run reads the same drift and writes nothing.
    """
    if not dry_run:
        RECALCULATE_SUBS.require()
    pg_lock = not era().keeps_redis
    try:
        with nullcontext() if pg_lock else named_lock(name=RECALCULATE_SUBS_LOCK):
            changes, failures = _drift(dry_run=dry_run, every_show=era().cuebot_owns_every_show, pg_lock=pg_lock)
    except LockBusy:
        metrics.RECALCULATE_SUBS_SKIPPED.inc()
        logger.info("recalculate_subs skipped: another instance is running it")
        return RecalculateSubsResult(changes=[], ran=False, dry_run=dry_run)
    if not dry_run:
        metrics.RECALCULATE_SUBS_ROWS.inc(len(changes))
        logger.info("recalculate_subs corrected %d subscription row(s)", len(changes))
        report_row_failures(failures, operation="recalculate_subs")
    return RecalculateSubsResult(changes=changes, ran=True, dry_run=dry_run, failures=failures)
