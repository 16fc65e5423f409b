"""What the task cluster runs: its functions, by dotted path, and their schedules.

The schedules are one list (SCHEDULES), applied by `manage.py setup_schedules` and matched
by name, so re-running it updates them in place. Entries gated by
ACCOUNTING_RECONCILE_ENABLED exist only when it is true (and are removed when it is false).

The reconciliation tasks are for a deployment that runs without the Rust scheduler's own
reseed loops: ACCOUNTING_RECONCILE_ENABLED turns them on. A run that finds the reseed
lock taken skips.

Every function the cluster runs is declared a task (`task`), with the Writes it makes: on an
observer (ACCOUNTING_WRITES=off) the schedules of a writing task are not made, and a writing task
that reaches its cluster all the same (queued by a writer sharing the task broker and database)
skips with a warning instead of writing.
"""

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.utils import timezone
from django_q.models import Schedule

from accounting.live.leases import LockBusy
from accounting.ownership import switching
from accounting.ownership.fleet import delete_stale_instances
from accounting.ownership.guardrail import run_guardrail
from accounting.reconcile.drift_check import run_drift_checks
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS, recalculate_subs
from accounting.reconcile.recompute import TABLE_REPAIR, recompute_pg_accounting
from accounting.reconcile.reseed import REDIS_REBUILD, REDIS_RESEED, ReseedSkipped, bootstrap_if_empty, reseed
from accounting.reconcile.snapshot import managed_show_ids
from accounting.usage.history import HistoryNotGranted
from accounting.usage.rollups import roll_up
from accounting.usage.terms import record_terms
from infra.era import era
from infra.writes import Write

log = logging.getLogger(__name__)


# The functions the cluster runs, by the dotted path it names them by: only these are scheduled.
TASKS: dict[str, Callable] = {}


def task(*, writes: tuple[Write, ...] = (), skipped: Any = None) -> Callable[[Callable], Callable]:
    """Declare a function the task cluster runs and the Writes it makes: on an observer a writing
    task returns `skipped` and says so in one line, rather than failing in WritesOff and being retried."""

    def declare(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if not all(write.allowed for write in writes):
                log.warning("%s skipped: ACCOUNTING_WRITES is off in this instance, which only observes", fn.__name__)
                return skipped
            return fn(*args, **kwargs)

        run.writes = writes  # type: ignore[attr-defined]
        TASKS[f"{fn.__module__}.{fn.__name__}"] = run
        return run

    return declare


@task(writes=(RECALCULATE_SUBS,), skipped=-1)
def recalculate_subs_task() -> int:
    """Rows corrected, or -1 when another instance held the lock (or writes are off here)."""
    result = recalculate_subs()
    return len(result.changes) if result.ran else -1


@task()  # the fleet register's rows, the service's own
def accounting_guardrail_task() -> bool:
    """Drops records of vanished processes, then checks the live fleet and the flagged shows;
    True when an instance does not publish or a show is stranded."""
    delete_stale_instances()
    return run_guardrail().failing


@task()  # its record of drift, the service's own
def drift_check_task() -> int:
    """Shows with drift at this check, in Cuebot's tables or (redis era) in Redis; the gauges and
    the admin's pages get the detail."""
    return run_drift_checks()


@task()  # the usage report's own tables: sizes over time and the rollups
def usage_task() -> int:
    """Records the subscriptions' sizes and bursts that changed since the last run, then rolls up
    the days that ended; returns the days rolled, -1 where the history may not be read (said once)."""
    now = timezone.now()
    record_terms(now=now)
    try:
        return roll_up(now=now)
    except HistoryNotGranted as refused:
        log.warning("usage roll-up skipped: %s", refused)
        return -1


@task(writes=(REDIS_RESEED,))
def retry_seed_show(*, show_id: str, attempt: int) -> None:
    switching.retry_seed_show(show_id=show_id, attempt=attempt)


@task(writes=(TABLE_REPAIR,))
def settle_recompute(*, show_id: str) -> None:
    switching.settle_recompute(show_id=show_id)


@task(writes=(REDIS_RESEED,))
def settle_reseed(*, show_id: str) -> None:
    switching.settle_reseed(show_id=show_id)


EMPTY_CHECKS_PER_RUN = 6
EMPTY_CHECK_INTERVAL_SECONDS = 10


@task(writes=(REDIS_RESEED, TABLE_REPAIR))
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


@task(writes=(REDIS_RESEED,))
def reconcile_limits() -> None:
    if not settings.ACCOUNTING_RECONCILE_ENABLED:
        return
    try:
        reseed(limits=True, booked=False)
    except LockBusy:
        log.info("limit reconciliation skipped: another reseed holds the lock")


@task(writes=(REDIS_REBUILD,), skipped=False)
def check_empty_redis() -> bool:
    """One check; True when Redis was empty and has been rebuilt."""
    if not settings.ACCOUNTING_RECONCILE_ENABLED:
        return False
    try:
        return bootstrap_if_empty()
    except (LockBusy, ReseedSkipped) as reason:
        log.warning("empty accounting Redis not rebuilt yet (%r); next check retries", reason)
        return False


@task(writes=(REDIS_REBUILD,))
def watch_empty_redis(
    *, checks: int = EMPTY_CHECKS_PER_RUN, interval_seconds: float = EMPTY_CHECK_INTERVAL_SECONDS
) -> None:
    pause = threading.Event()  # never set: a plain interval between checks
    for n in range(checks):
        check_empty_redis()
        if n < checks - 1:
            pause.wait(interval_seconds)


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    func: str
    minutes: int
    reconcile: bool = False  # only when ACCOUNTING_RECONCILE_ENABLED
    redis_era: bool = False  # only in the Redis eras: it reads or writes the acct:* keys
    minutes_setting: str = ""  # where a site chooses the interval: the setting that says, `minutes` its default

    @property
    def every(self) -> int:
        return getattr(settings, self.minutes_setting) if self.minutes_setting else self.minutes

    @property
    def writes(self) -> tuple[Write, ...]:
        """What its task declares it writes (made only when ACCOUNTING_WRITES is on); KeyError for a
        function that is no declared task."""
        return TASKS[self.func].writes  # type: ignore[attr-defined]

    def unwanted_because(self) -> str | None:
        if not all(write.allowed for write in self.writes):
            return "ACCOUNTING_WRITES is off"
        if self.redis_era and not era().keeps_redis:
            return f"ACCOUNTING_SCHEDULER is {era().name}: no acct:* keys"
        if self.reconcile and not settings.ACCOUNTING_RECONCILE_ENABLED:
            return "ACCOUNTING_RECONCILE_ENABLED is false"
        return None


SCHEDULES = (
    ScheduleSpec(name="recalculate_subs", func="accounting.tasks.recalculate_subs_task", minutes=120),
    ScheduleSpec(name="accounting_guardrail", func="accounting.tasks.accounting_guardrail_task", minutes=1),
    # Not gated on reconciling: drift deserves an alert whoever reconciles (accounting.reconcile.drift_check);
    # nor on Redis: Cuebot's own tables are checked in every era.
    ScheduleSpec(
        name="acct-drift-check",
        func="accounting.tasks.drift_check_task",
        minutes=2,
        minutes_setting="ACCOUNTING_DRIFT_CHECK_MINUTES",
    ),
    # Every drift check interval too: a size change is dated at most one interval late.
    ScheduleSpec(
        name="acct-usage",
        func="accounting.tasks.usage_task",
        minutes=2,
        minutes_setting="ACCOUNTING_DRIFT_CHECK_MINUTES",
    ),
    ScheduleSpec(
        name="acct-reconcile-booked",
        func="accounting.tasks.reconcile_booked",
        minutes=2,
        reconcile=True,
        redis_era=True,
    ),
    ScheduleSpec(
        name="acct-reconcile-limits",
        func="accounting.tasks.reconcile_limits",
        minutes=5,
        reconcile=True,
        redis_era=True,
    ),
    # django-q2 schedules are minute-granular; the task checks six times, 10 s apart.
    ScheduleSpec(
        name="acct-empty-redis-watch",
        func="accounting.tasks.watch_empty_redis",
        minutes=1,
        reconcile=True,
        redis_era=True,
    ),
)


def wanted_schedules() -> list[ScheduleSpec]:
    return [spec for spec in SCHEDULES if spec.unwanted_because() is None]


def apply_schedules() -> list[tuple[str, str]]:
    """Create, update or remove our schedules; returns (name, what happened) per schedule."""
    done = []
    wanted = wanted_schedules()
    for spec in wanted:
        fields = {"func": spec.func, "schedule_type": Schedule.MINUTES, "minutes": spec.every, "repeats": -1}
        matching = Schedule.objects.filter(name=spec.name).order_by("id")
        current = matching.first()
        if current is None:
            Schedule.objects.create(name=spec.name, **fields)
            done.append((spec.name, "created"))
            continue
        matching.exclude(pk=current.pk).delete()  # duplicates made by hand in the admin
        changed = any(getattr(current, key) != value for key, value in fields.items())
        if changed:
            for key, value in fields.items():
                setattr(current, key, value)
            current.save()
        done.append((spec.name, "updated" if changed else "unchanged"))
    for spec in SCHEDULES:
        reason = spec.unwanted_because()
        if reason:  # said either way: an operator turning writes on must know to run this again
            removed = Schedule.objects.filter(name=spec.name).delete()[0]
            done.append((spec.name, f"{'removed' if removed else 'not made'} ({reason})"))
    return done
