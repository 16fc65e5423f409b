"""The one list of django-q2 schedules this service runs; `manage.py setup_schedules` applies it.

Schedules are matched by name, so re-running the command updates them in place. Entries
gated by ACCOUNTING_RECONCILE_ENABLED exist only when it is true (and are removed when
it is false), for deployments without the Rust scheduler's own reseed loops.
"""
from dataclasses import dataclass

from django.conf import settings
from django_q.models import Schedule


@dataclass(frozen=True)
class ScheduleSpec:
    name: str
    func: str
    minutes: int
    reconcile: bool = False  # only when ACCOUNTING_RECONCILE_ENABLED


SCHEDULES = (
    ScheduleSpec(name="recalculate_subs", func="accounting.tasks.recalculate_subs_task", minutes=120),
    ScheduleSpec(name="accounting_guardrail", func="accounting.tasks.accounting_guardrail_task", minutes=1),
    # Not gated: drift deserves an alert whoever reconciles (accounting.drift_check).
    ScheduleSpec(name="acct-drift-check", func="accounting.tasks.drift_check_task", minutes=2),
    ScheduleSpec(name="acct-reconcile-booked", func="accounting.tasks.reconcile_booked", minutes=2, reconcile=True),
    ScheduleSpec(name="acct-reconcile-limits", func="accounting.tasks.reconcile_limits", minutes=5, reconcile=True),
    # django-q2 schedules are minute-granular; the task checks six times, 10 s apart.
    ScheduleSpec(name="acct-empty-redis-watch", func="accounting.tasks.watch_empty_redis", minutes=1, reconcile=True),
)


def wanted_schedules() -> list[ScheduleSpec]:
    return [spec for spec in SCHEDULES if settings.ACCOUNTING_RECONCILE_ENABLED or not spec.reconcile]


def apply_schedules() -> list[tuple[str, str]]:
    """Create, update or remove our schedules; returns (name, what happened) per schedule."""
    done = []
    wanted = wanted_schedules()
    for spec in wanted:
        fields = {"func": spec.func, "schedule_type": Schedule.MINUTES, "minutes": spec.minutes, "repeats": -1}
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
    wanted_names = {spec.name for spec in wanted}
    for spec in SCHEDULES:
        if spec.name not in wanted_names and Schedule.objects.filter(name=spec.name).delete()[0]:
            done.append((spec.name, "removed (ACCOUNTING_RECONCILE_ENABLED is false)"))
    return done
