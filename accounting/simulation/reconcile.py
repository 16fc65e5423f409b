"""The simulator's calls into the reconciliation side (accounting.reseed and the limit
services), in one place: the reconciler thread, the operator and the final check use them.
"""
import random
from dataclasses import dataclass

from accounting import reseed
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
    raise NotImplementedError("limit-change services (issue 5) have not landed")


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
