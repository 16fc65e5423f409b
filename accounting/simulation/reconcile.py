"""The simulator's calls into the reconciliation side (accounting.reseed and the limit
services), in one place: the reconciler thread, the operator and the final check use them.
"""
import random
from dataclasses import dataclass

from accounting import keys, reseed
from accounting.models import FolderResource, JobResource, Subscription
from accounting.units import UNLIMITED
from accounting.locks import LockBusy
from accounting.snapshot import booked_rows, limit_rows
from cuebot_acct.redis_factory import accounting_redis


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
    half, up or down, the way Cuebot's admin path does: a PG UPDATE, reaching Redis with the
    next limit reseed."""
    table = rng.choice(["subscription", "folder", "job"])
    if table == "subscription":
        row = Subscription.objects.filter(show_id__in=show_ids).order_by("pk").values_list("pk", "show_id", "alloc_id", "int_burst")
        pk, show_id, alloc_id, old = rng.choice(list(row))
        new = changed(rng=rng, old=old)
        Subscription.objects.filter(pk=pk).update(int_burst=new)
        return LimitChange(key=keys.sub(show_id=show_id, alloc_id=alloc_id), lowered=new < old)
    if table == "folder":
        pk, old = rng.choice(list(FolderResource.objects.filter(folder__show_id__in=show_ids).order_by("pk").values_list("folder_id", "int_max_cores")))
        new = changed(rng=rng, old=old)
        FolderResource.objects.filter(folder_id=pk).update(int_max_cores=new)
        return LimitChange(key=keys.folder(folder_id=pk), lowered=old == UNLIMITED or new < old)
    pk, old = rng.choice(list(JobResource.objects.filter(job__show_id__in=show_ids).order_by("pk").values_list("job_id", "int_max_cores")))
    new = changed(rng=rng, old=old)
    JobResource.objects.filter(job_id=pk).update(int_max_cores=new)
    return LimitChange(key=keys.job(job_id=pk), lowered=old == UNLIMITED or new < old)


def changed(*, rng: random.Random, old: int) -> int:
    base = 2000 if old == UNLIMITED else old
    return max(100, round(base * rng.uniform(0.5, 1.5) / 100) * 100)


@dataclass(frozen=True)
class DriftRow:
    key: str
    field: str
    redis: str | None
    pg: str


def drift_rows(*, show_ids: list[str]) -> list[DriftRow]:
    """Fields of these shows' keys where Redis differs from what PostgreSQL says it should hold."""
    expected = [(key, "int_cores", cores) for key, cores, _ in booked_rows(show_ids=show_ids)]
    expected += [(key, "int_gpus", gpus) for key, _, gpus in booked_rows(show_ids=show_ids)]
    expected += list(limit_rows(show_ids=show_ids))
    client = accounting_redis()
    found = []
    for start in range(0, len(expected), 1000):
        chunk = expected[start:start + 1000]
        with client.pipeline(transaction=False) as pipe:
            for key, field_name, _ in chunk:
                pipe.hget(key, field_name)
            for (key, field_name, value), actual in zip(chunk, pipe.execute()):
                actual = actual.decode() if actual is not None else None
                if actual != str(value):
                    found.append(DriftRow(key=key, field=field_name, redis=actual, pg=str(value)))
    return found
