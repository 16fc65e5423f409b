"""The simulator's calls into the reconciliation side (accounting.reseed, accounting.limits,
accounting.drift), in one place: the reconciler thread, the operator and the final check use them.
"""
import random
from dataclasses import dataclass

from django.utils import timezone
from django_q.models import Schedule

from accounting import keys, limits, reseed, switching
from accounting.drift import drift_report
from accounting.models import FolderResource, JobResource, Subscription
from accounting.units import UNLIMITED
from accounting.locks import LockBusy


def bootstrap_if_empty() -> bool:
    """True when Redis was empty and has been rebuilt."""
    try:
        return reseed.bootstrap_if_empty()
    except (reseed.ReseedSkipped, LockBusy):
        return False


def reseed_all() -> bool:
    """The farm reseed (booked counters, then limits) of every managed show; False when the
    booked compare-and-swap was skipped or another reseed held the farm lock."""
    try:
        report = reseed.reseed(limits=True, booked=True)
    except LockBusy:
        return False
    return report.booked.written


@dataclass(frozen=True)
class LimitChange:
    key: str
    lowered: bool


def change_random_limit(*, rng: random.Random, show_ids: list[str]) -> LimitChange:
    """An operator changes a burst, a folder cap or a job cap of one of these shows by up to
    half, up or down, through the limit services (Redis gets it after commit for managed shows)."""
    table = rng.choice(["subscription", "folder", "job"])
    if table == "subscription":
        subscription = rng.choice(list(Subscription.objects.filter(show_id__in=show_ids).order_by("pk")))
        old = subscription.int_burst
        new = changed(rng=rng, old=old)
        limits.set_subscription_limits(subscription=subscription, burst=new)
        return LimitChange(key=keys.sub(show_id=subscription.show_id, alloc_id=subscription.alloc_id), lowered=new < old)
    if table == "folder":
        resource = rng.choice(list(FolderResource.objects.filter(folder__show_id__in=show_ids).order_by("pk")))
        old = resource.int_max_cores
        new = changed(rng=rng, old=old)
        limits.set_folder_limits(folder_resource=resource, max_cores=new)
        return LimitChange(key=keys.folder(folder_id=resource.folder_id), lowered=old == UNLIMITED or new < old)
    resource = rng.choice(list(JobResource.objects.filter(job__show_id__in=show_ids).order_by("pk")))
    old = resource.int_max_cores
    new = changed(rng=rng, old=old)
    limits.set_job_limits(job_resource=resource, max_cores=new)
    return LimitChange(key=keys.job(job_id=resource.job_id), lowered=old == UNLIMITED or new < old)


def changed(*, rng: random.Random, old: int) -> int:
    base = 2000 if old == UNLIMITED else old
    return max(100, round(base * rng.uniform(0.5, 1.5) / 100) * 100)


def drift_rows(*, show_ids: list[str]) -> list:
    """accounting.drift's rows for these shows: every (key, field) where Redis differs from PostgreSQL."""
    return drift_report(show_ids=show_ids).rows if show_ids else []


def run_due_settle_recomputes(*, all_pending: bool = False) -> int:
    """The simulator runs no task cluster: it runs the settling recomputes that switches back
    to Cuebot scheduled (accounting.switching) when they fall due, or all of them at the end,
    once no booking can land any more. Returns how many ran."""
    due = Schedule.objects.filter(name__startswith=switching.SETTLE_RECOMPUTE_PREFIX)
    if not all_pending:
        due = due.filter(next_run__lte=timezone.now())
    ran = 0
    for name in list(due.values_list("name", flat=True)):
        if Schedule.objects.filter(name=name).delete()[0]:
            switching.settle_recompute(show_id=name.removeprefix(switching.SETTLE_RECOMPUTE_PREFIX))
            ran += 1
    return ran
