"""Writes to the accounting tables."""

# --- recalculate_subs: Cuebot's 2-hourly subscription recompute, show-aware ---
import logging
from dataclasses import dataclass

from django.db import connection, transaction

from accounting import metrics
from accounting.locks import LockBusy, named_lock

logger = logging.getLogger(__name__)

RECALCULATE_SUBS_LOCK = "recalculate_subs"
# Far longer than a run takes; only matters when a holder dies mid-run.
RECALCULATE_SUBS_LOCK_SECONDS = 600

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
        SELECT p.pk_show, h.pk_alloc, SUM(p.int_cores_reserved) AS cores, SUM(p.int_gpus_reserved) AS gpus
          FROM proc p
          JOIN host h ON h.pk_host = p.pk_host
          JOIN cuebot_shows c ON c.pk_show = p.pk_show
         WHERE NOT p.b_local
         GROUP BY p.pk_show, h.pk_alloc
     )
SELECT s.pk_subscription, c.str_name AS show_name, a.str_name AS alloc_name,
       s.int_cores AS old_cores, s.int_gpus AS old_gpus,
       COALESCE(b.cores, 0)::int AS new_cores, COALESCE(b.gpus, 0)::int AS new_gpus
  FROM subscription s
  JOIN cuebot_shows c ON c.pk_show = s.pk_show
  JOIN alloc a ON a.pk_alloc = s.pk_alloc
  LEFT JOIN booked b ON b.pk_show = s.pk_show AND b.pk_alloc = s.pk_alloc
 WHERE (s.int_cores, s.int_gpus) IS DISTINCT FROM (COALESCE(b.cores, 0)::int, COALESCE(b.gpus, 0)::int)
"""

FIX_SUBSCRIPTIONS = f"""
WITH drift AS ({SUBSCRIPTION_DRIFT})
UPDATE subscription s
   SET int_cores = d.new_cores, int_gpus = d.new_gpus
  FROM drift d
 WHERE s.pk_subscription = d.pk_subscription
RETURNING d.show_name, d.alloc_name, d.old_cores, d.old_gpus, d.new_cores, d.new_gpus
"""

SHOW_DRIFT = f"""
WITH drift AS ({SUBSCRIPTION_DRIFT})
SELECT d.show_name, d.alloc_name, d.old_cores, d.old_gpus, d.new_cores, d.new_gpus FROM drift d
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


def _drift(*, statement: str) -> list[SubscriptionChange]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(statement)
        rows = cursor.fetchall()
    changes = [SubscriptionChange(*row) for row in rows]
    return sorted(changes, key=lambda change: (change.show, change.alloc))


def recalculate_subs(*, dry_run: bool = False) -> RecalculateSubsResult:
    """Make Cuebot-managed shows' subscription int_cores/int_gpus equal SUM(proc), in one statement.

    One instance at a time, fleet-wide: a run that finds the lock held skips (ran=False).
    A dry run reads the same drift and writes nothing.
    """
    try:
        with named_lock(name=RECALCULATE_SUBS_LOCK, ttl_seconds=RECALCULATE_SUBS_LOCK_SECONDS):
            changes = _drift(statement=SHOW_DRIFT if dry_run else FIX_SUBSCRIPTIONS)
    except LockBusy:
        metrics.RECALCULATE_SUBS_SKIPPED.inc()
        logger.info("recalculate_subs skipped: another instance is running it")
        return RecalculateSubsResult(changes=[], ran=False, dry_run=dry_run)
    if not dry_run:
        metrics.RECALCULATE_SUBS_ROWS.inc(len(changes))
        logger.info("recalculate_subs corrected %d subscription row(s)", len(changes))
    return RecalculateSubsResult(changes=changes, ran=True, dry_run=dry_run)
