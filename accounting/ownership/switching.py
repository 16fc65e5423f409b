"""What happens after a show's ownership switch commits (called from accounting.ownership.toggle).

Only in the Redis and NOTIFY eras: in the Maestro era Cuebot writes the five tables for every
show, so a switch hands nothing over and the toggle calls nothing here.

To the scheduler (docs/design.md#lessons, the first two): in the Redis era (ACCOUNTING_REDIS_ENABLED) the show's
Redis limits and booked counters are seeded at once, so it neither rejects everything for
lack of limits nor starts at zero booked with procs running. The NOTIFY-era scheduler seeds
itself: it reads the flag and recomputes the show from SUM(proc) and its limits from the
tables on its own intervals, so there is nothing to send it at a switch. A failure never undoes the switch: it is logged, counted and
retried in the task cluster, and until then the periodic reseed is the safety net. A release
made on the old flag (a process whose flag cache has not caught up yet) goes down Cuebot's
branch and may commit after the seeding read SUM(proc); once the flag cache's TTL has passed
none can, and the show's booked counters are reseeded once more (a one-off task), so Redis
equals SUM(proc) again within that TTL plus the task cluster's scheduling delay.

Back to Cuebot: the show's five PG accounting tables are recomputed from `proc`, so
PostgreSQL is right at once instead of after the next cycle. That is not the end of it: a
scheduler that still sees the old flag (for up to the flag cache's TTL) can book on
Redis, and its proc commits up to one in-flight TTL later, after that recompute, into
rows that never counted it; its release on the Cuebot branch would then take the rows
below the truth. So for that settling window (flag TTL + in-flight TTL) a Cuebot-branch
release of the show recomputes the rows it touches instead of decrementing them, and
once the window is over, when no stale booking can still land, the show is recomputed
once more (a one-off task in the cluster).
"""

import logging
from datetime import timedelta

import redis
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from django_q.models import Schedule
from django_q.tasks import async_task

from accounting.live.leases import LockBusy, named_lock
from accounting.reconcile.recompute import recompute_pg_accounting, xid_horizon
from accounting.reconcile.reseed import FARM_LOCK, close_show, open_to_booking, reseed_booked, seed_show
from infra import metrics
from infra.era import era
from shows.selectors import is_scheduler_managed, settling_cache_key, settling_mark

logger = logging.getLogger(__name__)

# Attempts after the first, the first retry at once, then 20 s, 40 s, 80 s, 160 s later.
SEED_RETRIES = 5
FIRST_BACKOFF_SECONDS = 20


class SwitchRefused(Exception):
    """The switch cannot be made safely now; nothing changed."""


def before_switch_to_scheduler(*, show_id: str) -> None:
    """Called in the switch's transaction, before its UPDATE: the show's keys are closed to
    booking (accounting.reconcile.reseed.close_show) before the scheduler can see the new flag.
    One MULTI, while the show's row is locked (an operator's action, bounded by the Redis
    client's timeout). A Redis that cannot be reached refuses the switch: the show's stale keys
    could still be open."""
    if not era().keeps_redis:
        return
    try:
        close_show(show_id=show_id)
    except (redis.RedisError, OSError) as error:
        raise SwitchRefused(
            f"the show's Redis keys could not be closed before the switch ({type(error).__name__}: {error}); "
            "its stale limits would let the scheduler book before its counters are seeded. Nothing changed; "
            "retry once the accounting Redis answers"
        ) from error


def after_switch_to_scheduler(*, show_id: str) -> None:
    if not era().keeps_redis:
        return
    _schedule_once(
        name=f"{SETTLE_RESEED_PREFIX}{show_id}",
        func="accounting.tasks.settle_reseed",
        show_id=show_id,
        seconds=settings.SHOW_FLAG_CACHE_SECONDS,
        failure_metric=metrics.SWITCH_SEED_FAILURES,
        consequence="a release made on the old flag may leave its Redis counters high until the next reseed",
    )
    try:
        seed_show(show_id=show_id)
    except Exception:
        logger.warning(
            "seeding Redis for show %s after its switch to the scheduler failed; retrying in the task cluster",
            show_id,
            exc_info=True,
        )
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
            logger.error(
                "seeding Redis for show %s failed %d times; the periodic reseed must heal it",
                show_id,
                attempt + 1,
                exc_info=True,
            )
            return
        delay = FIRST_BACKOFF_SECONDS * 2 ** (attempt - 1)
        logger.warning(
            "seeding retry %d for show %s failed; next attempt in %d s", attempt, show_id, delay, exc_info=True
        )
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


SETTLE_RECOMPUTE_PREFIX = "settle_recompute:"
AT_THE_SWITCH = "at the switch"
SETTLE_RESEED_PREFIX = "settle_reseed:"


def _schedule_once(*, name: str, func: str, show_id: str, seconds: float, failure_metric, consequence: str) -> None:
    """A one-off task for the show in the cluster, `seconds` from now (a later switch replaces it)."""
    try:
        Schedule.objects.update_or_create(
            name=name,
            defaults=dict(
                func=func,
                kwargs={"show_id": show_id},
                schedule_type=Schedule.ONCE,
                repeats=-1,
                next_run=timezone.now() + timedelta(seconds=seconds),
            ),
        )
    except Exception:
        logger.error("could not schedule %s for show %s: %s", func, show_id, consequence, exc_info=True)
        failure_metric.inc()


def settle_reseed(*, show_id: str) -> None:
    """The booked counters of a show switched to the scheduler, once more from SUM(proc), once no
    release made on the old flag can still commit (the flag cache's TTL after the switch).

    Such a release went down Cuebot's branch, which registers nothing in flight, and may have
    committed after the seeding read SUM(proc): the seeding counted its proc, and nothing ever
    takes it off. A reseed now finds it gone. A show that is not open to booking (back with
    Cuebot, or its seeding still owed) is left to its own seeding."""
    if not is_scheduler_managed(show_id=show_id) or not open_to_booking(show_ids=[show_id]):
        logger.info("show %s is not open to booking on the scheduler's side; its settling reseed is dropped", show_id)
        return
    try:
        with named_lock(name=f"{FARM_LOCK}:show:{show_id}"):
            reseed_booked(show_ids=[show_id], scope="show")
    except LockBusy:
        logger.info(
            "show %s is being seeded; its settling reseed is dropped (the seeding reads SUM(proc) now)", show_id
        )


def settling_seconds() -> int:
    """How long after a switch back a booking made on the old flag can still commit."""
    return settings.SHOW_FLAG_CACHE_SECONDS + settings.ACCOUNTING_INFLIGHT_TTL_SECONDS


def mark_settling(*, show_id: str, counted_below: int | None = None) -> None:
    """Called inside the switch's transaction, before its UPDATE: a release that sees the
    new flag a moment after the commit must already find the show settling. Safe before the
    commit: if the switch rolls back the show stays scheduler-managed, and a scheduler-managed
    show's releases never look at the mark. Marked again once the switch-back recompute is
    done, with the xid horizon below which it counted every proc (shows.selectors.Ownership)."""
    cache.set(
        settling_cache_key(show_id=show_id), settling_mark(counted_below=counted_below), timeout=settling_seconds()
    )


def after_switch_to_cuebot(*, show_id: str) -> None:
    # Runs in on_commit: the switch has committed and its caller must not see it fail.
    # The recompute already reran itself after a deadlock (infra.transactions).
    _schedule_once(
        name=f"{SETTLE_RECOMPUTE_PREFIX}{show_id}",
        func="accounting.tasks.settle_recompute",
        show_id=show_id,
        seconds=settling_seconds(),
        failure_metric=metrics.SWITCH_RECOMPUTE_FAILURES,
        consequence="a booking made on the old flag may leave its PG rows low until recomputed",
    )
    recompute_after_switch_back(show_id=show_id, when=AT_THE_SWITCH)


def settle_recompute(*, show_id: str) -> None:
    """The second recompute, once no booking made on the old flag can still land."""
    if is_scheduler_managed(show_id=show_id):
        logger.info("show %s went back to the scheduler; its settling recompute is dropped", show_id)
        return
    recompute_after_switch_back(show_id=show_id, when="once settled")


# How long the switch-back waits for the transactions running at the switch to end before its
# recompute, so that it knows which procs it counted (accounting.reconcile.recompute.xid_horizon).
COUNTED_WAIT_SECONDS = 5.0


def recompute_after_switch_back(*, show_id: str, when: str) -> None:
    try:
        horizon = xid_horizon(wait_seconds=COUNTED_WAIT_SECONDS) if when == AT_THE_SWITCH else None
        failures = recompute_pg_accounting(show_ids=[show_id])
        if horizon is not None and not failures:
            # The settling releases of procs inserted below it decrement (this recompute counted
            # them) instead of recomputing: the show's releases no longer queue on its rows.
            mark_settling(show_id=show_id, counted_below=horizon)
    except Exception:
        logger.warning(
            "recomputing the PG accounting tables of show %s %s after its switch back to Cuebot failed; "
            "they keep their old values until recomputed",
            show_id,
            when,
            exc_info=True,
        )
        metrics.SWITCH_RECOMPUTE_FAILURES.inc()
