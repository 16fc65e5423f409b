"""Scheduled reconciliation (django-q2), for a deployment that runs without the Rust
scheduler's own reseed loops: ACCOUNTING_RECONCILE_ENABLED turns it on.

Schedules (manage.py setup_schedules): reconcile_booked every 2 minutes, reconcile_limits
every 5 minutes, watch_empty_redis every minute (it checks six times, 10 s apart, since
django-q2 schedules are minute-granular). A run that finds the reseed lock taken skips.
"""
import logging
import threading

from django.conf import settings

from accounting.locks import LockBusy
from accounting.reseed import ReseedSkipped, bootstrap_if_empty, reseed

log = logging.getLogger(__name__)

EMPTY_CHECKS_PER_RUN = 6
EMPTY_CHECK_INTERVAL_SECONDS = 10


def reconcile_booked() -> None:
    if not settings.ACCOUNTING_RECONCILE_ENABLED:
        return
    try:
        reseed(limits=False, booked=True)
    except LockBusy:
        log.info("booked reconciliation skipped: another reseed holds the lock")


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
