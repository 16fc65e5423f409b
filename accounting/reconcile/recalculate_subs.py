"""recalculate_subs: Cuebot's 2-hourly subscription recompute, aware of who owns each show."""
import logging
from dataclasses import dataclass, field

from django.db import connection, transaction

from accounting.live.leases import LockBusy, named_lock
from accounting.reconcile.recompute import (
    RESTORE_BURSTS,
    RowFailure,
    report_row_failures,
    restore_moved_caps,
    run_row_by_row_on_failure,
)
from cuebot_acct import metrics

logger = logging.getLogger(__name__)

RECALCULATE_SUBS_LOCK = "recalculate_subs"

# Subscriptions of Cuebot-managed shows whose int_cores/int_gpus differ from SUM(proc) of
# their non-local procs (allocation through the proc's host). Scheduler-managed shows are
# left out by the WHERE itself, so their rows are never touched. FOR SHARE holds the
# Cuebot shows' rows until the statement ends: a toggle that commits meanwhile waits, and
# one that committed first is re-read, so a show that just became scheduler-managed is
# excluded too.
SUBSCRIPTION_DRIFT = """
WITH cuebot_shows AS (
        SELECT pk_show, str_name FROM show WHERE NOT b_scheduler_managed FOR SHARE
     ),
     booked AS (
        -- The shows are filtered at the proc scan (the array is computed once), so only
        -- Cuebot-managed procs are joined to their host.
        SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p
          JOIN host h ON h.pk_host = p.pk_host
         WHERE NOT p.b_local AND p.pk_show = ANY(ARRAY(SELECT pk_show FROM cuebot_shows))
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

# A row legitimately above its burst gets its true SUM(proc) too: the burst moves in the
# same UPDATE and back afterwards (accounting.reconcile.recompute explains the trick).
FIX_SUBSCRIPTIONS = f"""
WITH drift AS ({SUBSCRIPTION_DRIFT})
UPDATE subscription s
   SET int_cores = d.new_cores, int_gpus = d.new_gpus,
       int_burst = CASE WHEN d.new_cores > s.int_cores AND d.new_cores > s.int_burst THEN -s.int_burst - 1 ELSE s.int_burst END
  FROM drift d
 WHERE s.pk_subscription = d.pk_subscription
RETURNING d.show_name, d.alloc_name, d.old_cores, d.old_gpus, d.new_cores, d.new_gpus, s.pk_subscription,
          d.new_cores > d.old_cores AND d.new_cores > d.old_burst
"""

SHOW_DRIFT = f"""
WITH drift AS ({SUBSCRIPTION_DRIFT})
SELECT d.show_name, d.alloc_name, d.old_cores, d.old_gpus, d.new_cores, d.new_gpus, d.pk_subscription FROM drift d
"""


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
 WHERE NOT c.b_scheduler_managed ORDER BY s.pk_subscription
"""


def _read_drift(cursor) -> list[tuple]:
    cursor.execute(SHOW_DRIFT, {"only": None})
    return cursor.fetchall()


def _cuebot_managed_subscriptions(cursor) -> list[str]:
    cursor.execute(CUEBOT_MANAGED_SUBSCRIPTIONS)
    return [pk for (pk,) in cursor.fetchall()]


def _fix_drift(cursor, only: str | None) -> list[tuple]:
    cursor.execute(FIX_SUBSCRIPTIONS, {"only": only})
    rows = cursor.fetchall()
    restore_moved_caps(cursor=cursor, restore=RESTORE_BURSTS, moved=[row[6:] for row in rows])
    return rows


def _drift(*, dry_run: bool) -> tuple[list[SubscriptionChange], list[RowFailure]]:
    with transaction.atomic(), connection.cursor() as cursor:
        # JIT compilation cost more than the aggregate it would speed up, on every run.
        cursor.execute("SET LOCAL jit = off")
        if dry_run:
            rows, failures = _read_drift(cursor), []
        else:
            rows, failures = run_row_by_row_on_failure(
                table="subscription", run=lambda only: _fix_drift(cursor, only),
                keys=lambda: _cuebot_managed_subscriptions(cursor),
            )
    changes = [SubscriptionChange(*row[:6]) for row in rows]
    return sorted(changes, key=lambda change: (change.show, change.alloc)), failures


def recalculate_subs(*, dry_run: bool = False) -> RecalculateSubsResult:
    """Make Cuebot-managed shows' subscription int_cores/int_gpus equal SUM(proc), in one statement.

    One instance at a time, fleet-wide: a run that finds the lock held skips (ran=False).
    A dry run reads the same drift and writes nothing.
    """
    try:
        with named_lock(name=RECALCULATE_SUBS_LOCK):
            changes, failures = _drift(dry_run=dry_run)
    except LockBusy:
        metrics.RECALCULATE_SUBS_SKIPPED.inc()
        logger.info("recalculate_subs skipped: another instance is running it")
        return RecalculateSubsResult(changes=[], ran=False, dry_run=dry_run)
    if not dry_run:
        metrics.RECALCULATE_SUBS_ROWS.inc(len(changes))
        logger.info("recalculate_subs corrected %d subscription row(s)", len(changes))
        report_row_failures(failures, operation="recalculate_subs")
    return RecalculateSubsResult(changes=changes, ran=True, dry_run=dry_run, failures=failures)
