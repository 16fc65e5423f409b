"""What happens after a show's ownership switch commits (called from shows.services).

To the scheduler (lessons 1 and 2): the show's Redis limits and booked counters are
seeded at once, so it neither rejects everything for lack of limits nor starts at zero
booked with procs running. A failure never undoes the switch: it is logged, counted and
retried in the task cluster, and until then the periodic reseed is the safety net.

Back to Cuebot: the show's five PG accounting tables are recomputed from `proc`, so
PostgreSQL is right at once instead of after the next cycle.
"""
import logging
from datetime import timedelta

from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task

from accounting import metrics
from accounting.recompute import recompute_pg_accounting
from accounting.reseed import seed_show
from shows.selectors import is_scheduler_managed

logger = logging.getLogger(__name__)

# Attempts after the first, the first retry at once, then 20 s, 40 s, 80 s, 160 s later.
SEED_RETRIES = 5
FIRST_BACKOFF_SECONDS = 20


def after_switch_to_scheduler(*, show_id: str) -> None:
    try:
        seed_show(show_id=show_id)
    except Exception:
        logger.warning("seeding Redis for show %s after its switch to the scheduler failed; retrying in the task cluster",
                       show_id, exc_info=True)
        metrics.SWITCH_SEED_FAILURES.inc()
        try:
            async_task("accounting.tasks.retry_seed_show", show_id=show_id, attempt=1)
        except Exception:
            # The switch has committed; the caller must not see it fail. The periodic reseed heals.
            logger.error("could not enqueue the seeding retry for show %s", show_id, exc_info=True)


def retry_seed_show(*, show_id: str, attempt: int) -> None:
    """One retry; a failure schedules the next one, with a doubling delay, up to SEED_RETRIES."""
    if not is_scheduler_managed(show_id=show_id):
        logger.info("show %s is no longer scheduler-managed; its seeding retry is dropped", show_id)
        return
    try:
        seed_show(show_id=show_id)
    except Exception:
        metrics.SWITCH_SEED_FAILURES.inc()
        if attempt >= SEED_RETRIES:
            logger.error("seeding Redis for show %s failed %d times; the periodic reseed must heal it",
                         show_id, attempt + 1, exc_info=True)
            return
        delay = FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1)
        logger.warning("seeding retry %d for show %s failed; next attempt in %d s", attempt, show_id, delay, exc_info=True)
        Schedule.objects.create(
            name=f"seed_show:{show_id}:{attempt + 1}",
            func="accounting.tasks.retry_seed_show",
            kwargs={"show_id": show_id, "attempt": attempt + 1},
            schedule_type=Schedule.ONCE,
            repeats=-1,
            next_run=timezone.now() + timedelta(seconds=delay),
        )
        return
    logger.info("seeded Redis for show %s on retry %d", show_id, attempt)


def after_switch_to_cuebot(*, show_id: str) -> None:
    # Runs in on_commit: the switch has committed and its caller must not see it fail.
    # The recompute already reran itself after a deadlock (accounting.transient).
    try:
        recompute_pg_accounting(show_ids=[show_id])
    except Exception:
        logger.warning("recomputing the PG accounting tables of show %s after its switch back to Cuebot failed; "
                       "they keep their old values until recomputed", show_id, exc_info=True)
        metrics.SWITCH_RECOMPUTE_FAILURES.inc()
