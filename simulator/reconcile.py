"""The simulator's calls into the reconciliation side (accounting.reconcile.reseed, accounting.limits.changes,
accounting.reconcile.redis_against_pg), in one place: the reconciler thread, the operator and the final check use them.
"""

import random
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from django.utils import timezone
from django_q.models import Schedule

from accounting.limits import changes as limits
from accounting.live import keys
from accounting.live.leases import LockBusy
from accounting.live.scripts import LuaScript
from accounting.live.units import UNLIMITED
from accounting.models import FolderResource, JobResource, Subscription
from accounting.ownership import switching
from accounting.reconcile import reseed
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.snapshot import booked_rows, chunked, managed_show_ids
from infra.redis_factory import accounting_redis

# The reference design's reseed write, kept here and not beside the service's scripts
# (accounting/live/lua/): only the simulator's scheduler-like reseeder runs it.
REFERENCE_RESEED_WRITE = LuaScript(
    name="reference_reseed_write",
    source=(Path(__file__).resolve().parent / "lua" / "reference_reseed_write.lua").read_text(),
)


def bootstrap_if_empty() -> bool:
    """True when Redis was empty and has been rebuilt."""
    try:
        return reseed.bootstrap_if_empty()
    except (reseed.ReseedSkipped, LockBusy):
        return False


@dataclass(frozen=True)
class FarmReseed:
    written: bool
    # The reseed found Redis empty and was its bootstrap (reseed() runs it then), which the
    # run counts with the bootstraps of its own empty-Redis check.
    bootstrapped: bool


def reseed_all() -> FarmReseed:
    """The farm reseed (booked counters, then limits) of every managed show; not written when
    the booked cycle was skipped or another reseed held the farm lock."""
    try:
        report = reseed.reseed(limits=True, booked=True)
    except LockBusy:
        return FarmReseed(written=False, bootstrapped=False)
    return FarmReseed(written=report.booked is not None and report.booked.written, bootstrapped=report.bootstrapped)


@dataclass(frozen=True)
class SchedulerReseed:
    written: bool
    # Keys written while a live in-flight operation touched them: each may now read low
    # (a booking whose proc is not committed yet, or a release whose decrement comes later).
    exposed_keys: int
    # Every key the reseed wrote (all of them, or those of the chunks before a refused one),
    # and per exposed key the live entries' amounts (cores, GPUs) its write ignored: how far
    # below SUM(proc) that write may have left it, until the key's next write.
    keys_written: frozenset[str] = frozenset()
    ignored: dict[str, tuple[int, int]] = field(default_factory=dict)


def reseed_like_scheduler(*, show_ids: list[str]) -> SchedulerReseed:
    """One booked reseed the way the reference design (the scheduler's own recompute) does
    it: read acct:seq, SUM(proc) without the procs of FINISHED jobs, compare-and-swap; no
    in-flight overlay, no retry."""
    client = accounting_redis()
    seq_before = client.get(keys.SEQ) or b""
    written: set[str] = set()
    ignored: dict[str, tuple[int, int]] = {}

    def outcome(*, done: bool) -> SchedulerReseed:
        return SchedulerReseed(
            written=done, exposed_keys=len(ignored), keys_written=frozenset(written), ignored=ignored
        )

    with closing(booked_rows(show_ids=show_ids, finished_jobs=False)) as rows:
        for chunk in chunked(rows, reseed.CHUNK_KEYS):
            args = [seq_before, *(part for key, cores, gpus, _ in chunk for part in (key, cores, gpus))]
            reply = REFERENCE_RESEED_WRITE.run(client, keys=[keys.SEQ, keys.INFLIGHT], args=args)
            if not int(reply[0]):
                return outcome(done=False)
            written.update(key for key, *_ in chunk)
            for i in range(3, len(reply), 3):
                ignored[reply[i].decode()] = (int(reply[i + 1]), int(reply[i + 2]))
    return outcome(done=True)


def reseed_all_like_scheduler() -> SchedulerReseed:
    """The scheduler's cycle on every managed show: its booked reseed, then the limits."""
    shows = managed_show_ids()
    outcome = reseed_like_scheduler(show_ids=shows)
    reseed.write_limits(show_ids=shows)
    return outcome


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
        return LimitChange(
            key=keys.sub(show_id=subscription.show_id, alloc_id=subscription.alloc_id), lowered=new < old
        )
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
    """accounting.reconcile.redis_against_pg's rows for these shows: every (key, field) where Redis differs from PostgreSQL."""
    return drift_report(show_ids=show_ids).rows if show_ids else []


def run_due_settle_recomputes(*, all_pending: bool = False) -> int:
    """The simulator runs no task cluster: it runs the settling recomputes that switches back
    to Cuebot scheduled (accounting.ownership.switching) when they fall due, or all of them at the end,
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
