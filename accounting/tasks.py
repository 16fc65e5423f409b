"""Functions the task cluster runs, by dotted path (schedules in accounting.schedules).

The reconciliation tasks are for a deployment that runs without the Rust scheduler's own
reseed loops: ACCOUNTING_RECONCILE_ENABLED turns them on. A run that finds the reseed
lock taken skips.
"""
import logging
import threading

from django.conf import settings

from accounting import switching
from accounting.drift_check import run_drift_check
from accounting.guardrail import run_guardrail
from accounting.instances import delete_stale_instances
from accounting.locks import LockBusy
from accounting.recompute import recompute_pg_accounting
from accounting.reseed import ReseedSkipped, bootstrap_if_empty, reseed
from accounting.services import recalculate_subs
from accounting.snapshot import managed_show_ids

log = logging.getLogger(__name__)


def recalculate_subs_task() -> int:
    """Rows corrected, or -1 when another instance held the lock."""
    result = recalculate_subs()
    return len(result.changes) if result.ran else -1


def accounting_guardrail_task() -> bool:
    """Drops records of vanished processes, then checks the live fleet; True when misconfigured."""
    delete_stale_instances()
    return run_guardrail().misconfigured


def drift_check_task() -> int:
    """Shows with drift at this check (the gauges and the admin's overview get the detail)."""
    return sum(1 for fields in run_drift_check().fields_drifted.values() if fields)


def retry_seed_show(*, show_id: str, attempt: int) -> None:
    switching.retry_seed_show(show_id=show_id, attempt=attempt)


def settle_recompute(*, show_id: str) -> None:
    switching.settle_recompute(show_id=show_id)


EMPTY_CHECKS_PER_RUN = 6
EMPTY_CHECK_INTERVAL_SECONDS = 10


def reconcile_booked() -> None:
    """The reference's 2-minute recompute, both halves: Redis booked counters and, so that
    CueGUI's view of scheduler-managed shows stays fresh, their PG accounting tables (which
    nothing else writes while the scheduler owns them)."""
    if not settings.ACCOUNTING_RECONCILE_ENABLED:
        return
    try:
        reseed(limits=False, booked=True)
    except LockBusy:
        log.info("booked reconciliation skipped: another reseed holds the lock")
        return
    recompute_pg_accounting(show_ids=managed_show_ids())


def reconcile_limits() -> None:
    if not settings.ACCOUNTING_RECONCILE_ENABLED:
        return
    try:
        reseed(limits=True, booked=False)
    except LockBusy:
        log.info("limit reconciliation skipped: another reseed holds the lock")


def check_empty_redis() -> bool:
    """One check; True when Redis was empty and has been rebuilt."""
    if not settings.ACCOUNTING_RECONCILE_ENABLED:
        return False
    try:
        return bootstrap_if_empty()
    except (LockBusy, ReseedSkipped) as reason:
        log.warning("empty accounting Redis not rebuilt yet (%r); next check retries", reason)
        return False


def watch_empty_redis(*, checks: int = EMPTY_CHECKS_PER_RUN, interval_seconds: float = EMPTY_CHECK_INTERVAL_SECONDS) -> None:
    pause = threading.Event()  # never set: a plain interval between checks
    for n in range(checks):
        check_empty_redis()
        if n < checks - 1:
            pause.wait(interval_seconds)
