"""Limit changes (size/burst, folder and job caps, point minimums) that reach Redis at once.

The PG update commits first; for a scheduler-managed show the new limit fields are then
written to Redis from `transaction.on_commit` (publish iff commit), cores converted and -1
verbatim, through limit_write.lua, which bumps acct:seq so a reseed in flight retries. A
failed Redis write is logged at WARN, counted and swallowed, as for the release: the limit
reseed (every 5 min) heals it. On a Redis not seeded since a restart a key that carries no
limit field yet is not written (limit_write.lua's guard): limit fields would open it before
its counters are rebuilt, and the rebuild writes the committed value anyway. A key that
already carries limit fields is open already, whoever rebuilt it (the scheduler's bootstrap
never sets acct:seeded), and is written. A refused write is loud: WARN, a metric, and
`acct_drift` names it as the cause of the drifted fields. All amounts here are PG units (centicores); the admin, the
commands and the API read operator input in cores with `accounting.live.units.parse_cores` (one decimals policy).

The NOTIFY era (ACCOUNTING_NOTIFY_ENABLED) hears five caps live, as Cuebot's DAOs send them:
a subscription's burst, a folder's and a job's max cores and max GPUs, one acct_limit_change
per changed field, queued in the transaction of the UPDATE (delivered iff it commits). Sizes,
minimums, priorities and points are left to the scheduler's limit reseed (300 s), as in Cuebot.

The managed flag is read from PostgreSQL inside the transaction, not from the 30 s cache:
limit changes are rare and must follow the flag as committed.
"""

import logging
from typing import TypeVar, cast

import redis
from django.db import connection, models, transaction

from accounting.live import keys
from accounting.live.scripts import script
from accounting.live.units import UNLIMITED, WHOLE_CORES, format_cores
from accounting.models import FolderResource, JobResource, Point, Subscription
from accounting.notify import send as notify_send
from accounting.notify.payloads import LIMIT_CHANGE, max_cores_payload, max_gpus_payload, subscription_burst_payload
from accounting.reconcile.snapshot import redis_limits
from infra.era import era
from infra.metrics import LIMIT_PUBLISH_FAILURES, LIMIT_WRITES_REFUSED
from infra.redis_factory import accounting_redis
from infra.writes import Write
from shows.attach import writer_grant
from shows.models import Show

log = logging.getLogger(__name__)

LimitInstance = Subscription | FolderResource | JobResource | Point
# one of the four, the same one in and out (_apply)
L = TypeVar("L", Subscription, FolderResource, JobResource, Point)


class InvalidLimit(ValueError):
    pass


# A limit change of each table, as its faces declare it and its refusal names it.
LIMIT_CHANGES = {
    table: Write(action=f"a limit change of {table}", grant=writer_grant(table))
    for table in (model._meta.db_table for model in (Subscription, FolderResource, JobResource, Point))
}

# The only limits where Cuebot reads -1 as "unlimited". Elsewhere its checks compare the
# value as a number: a subscription's burst or a job's max of -1 stops every later booking.
UNLIMITED_ALLOWED = {(FolderResource, "int_max_cores"), (FolderResource, "int_max_gpus")}


# Cuebot's folder DAO (GroupDaoJdbc.updateMaxCores) refuses a folder max below one core that
# is not -1: a stored 0 means "book nothing" to Cuebot's dispatcher and "unlimited" to the
# scheduler, whose cap checks skip a cap that is not above 0 (and whole cores: below).
ONE_CORE_OR_UNLIMITED = {(FolderResource, "int_max_cores")}
ONE_CORE = 100


# The caps Cuebot keeps in whole cores: its gRPC setters for a folder's and a job's max and
# min cores and a department's managed (point min) cores convert with
# Convert.coresToWholeCoreUnits (rounded to a whole core); only a subscription's size and
# burst take hundredths (coresToCoreUnits). Cuebot never writes 2.5 cores into these, so
# neither does this service: a fraction is refused, on every face, with WHOLE_CORES.
WHOLE_CORES_COLUMNS = {
    (FolderResource, "int_max_cores"),
    (FolderResource, "int_min_cores"),
    (JobResource, "int_max_cores"),
    (JobResource, "int_min_cores"),
    (Point, "int_min_cores"),
}


# Cuebot's tier trigger stores -int_size in subscription.float_tier, NUMERIC(16, 2), while
# nothing is booked: a larger size fails there although the bigint column would hold it.
TIER_BOUND: dict[tuple[type[models.Model], str], int] = {(Subscription, "int_size"): 10**14 - 1}


def column_max(*, model: type[models.Model], column: str) -> int:
    """The largest value `column` can take (integer or bigint, and Cuebot's triggers), in PG units."""
    # `column` names one of the model's own integer columns, never a relation or generic key
    field = cast(models.Field, model._meta.get_field(column))
    top = connection.ops.integer_field_range(field.get_internal_type())[1]
    return min(top, TIER_BOUND.get((model, column), top))


def check_limit(*, model: type[models.Model], name: str, value: int | None) -> None:
    """Raise InvalidLimit unless the column may hold `value` (PG units) as Cuebot would write it."""
    if value is None:
        return
    top = column_max(model=model, column=name)
    if value > top:
        raise InvalidLimit(f"{name} must be at most {top} (what the column holds), got {value}")
    if (model, name) in ONE_CORE_OR_UNLIMITED and 0 <= value < ONE_CORE:
        raise InvalidLimit(
            f"{name}: a folder's max cores must be one core or more (1.5 is fine), or unlimited (-1), as "
            f"Cuebot's folder DAO requires (0 would mean 'book nothing' to Cuebot, 'no cap' to the "
            f"scheduler); got {format_cores(value)}"
        )
    if (model, name) in WHOLE_CORES_COLUMNS and value > 0 and value % ONE_CORE:
        raise InvalidLimit(f"{name}: {WHOLE_CORES} (got {format_cores(value)})")
    if value >= 0:
        return
    if value == UNLIMITED and (model, name) in UNLIMITED_ALLOWED:
        return
    if value == UNLIMITED:
        raise InvalidLimit(
            f"{name}: -1 does not mean unlimited here (Cuebot compares it as a number); give a value >= 0"
        )
    allowed = ">= 0 or -1 (unlimited)" if (model, name) in UNLIMITED_ALLOWED else ">= 0"
    raise InvalidLimit(f"{name} must be {allowed}, got {value}")


def limit_fields(*, instance: LimitInstance) -> tuple[str, str, list[tuple[str, int]]]:
    """(show id, Redis key, [(field, value in Redis units)]) of one limit row."""
    fields = redis_limits(model=type(instance), column=lambda name: getattr(instance, name))
    if isinstance(instance, Subscription):
        return instance.show_id, keys.sub(show_id=instance.show_id, alloc_id=instance.alloc_id), fields
    if isinstance(instance, FolderResource):
        return instance.folder.show_id, keys.folder(folder_id=instance.folder_id), fields
    if isinstance(instance, JobResource):
        return instance.job.show_id, keys.job(job_id=instance.job_id), fields
    return instance.show_id, keys.point(dept_id=instance.dept_id, show_id=instance.show_id), fields


def write_limit_fields(*, key: str, fields: list[tuple[str, int]]) -> None:
    """After commit: write, or WARN + count + swallow (the limit reseed heals)."""
    try:
        # limit_write.lua returns 0 or the new sequence number on every path: an integer reply.
        written = cast(
            int,
            script("limit_write").run(
                accounting_redis(),
                keys=[keys.SEQ, keys.SEEDED, keys.LIMITS_REFUSED, keys.CLOSED_SHOWS],
                args=[keys.SEEDED_VALUE, "1", *(part for f, v in fields for part in (key, f, v))],
            ),
        )
    except (redis.RedisError, OSError) as error:
        LIMIT_PUBLISH_FAILURES.inc()
        log.warning("limit write to Redis failed for %s (%s); the limit reseed will heal it", key, error)
        return
    if not int(written):
        LIMIT_WRITES_REFUSED.inc()
        log.warning(
            "limit write for %s refused: the key is closed to booking, on a Redis not rebuilt since it came up "
            "or for a show switched to the scheduler and not seeded yet (PostgreSQL has the new value; the "
            "rebuild, the show's seeding or `acct_reseed` writes it)",
            key,
        )


def publish_limits_on_commit(*, instance: LimitInstance) -> None:
    """Schedule the Redis write of this row's limits for after commit, if its show is managed.

    Call inside the transaction that saved `instance` (the admin does, through save_model).
    """
    if not era().keeps_redis:
        return  # no Redis era here: nothing reads acct:* keys
    show_id, key, fields = limit_fields(instance=instance)
    if isinstance(instance, JobResource) and instance.job.str_state == "FINISHED":
        return  # reseeds leave finished jobs out; the scheduler never books them
    if not Show.objects.filter(pk=show_id, b_scheduler_managed=True).exists():
        return
    transaction.on_commit(lambda: write_limit_fields(key=key, fields=fields))


def limit_change_payloads(*, instance: LimitInstance, changed: list[str]) -> list[str]:
    """The acct_limit_change payloads for the changed columns of `instance` the scheduler
    enforces live, in the order given; none for the others."""
    payloads = []
    for name in changed:
        value = getattr(instance, name)
        if isinstance(instance, Subscription) and name == "int_burst":
            payloads.append(
                subscription_burst_payload(show_id=instance.show_id, alloc_id=instance.alloc_id, burst_centicores=value)
            )
        elif isinstance(instance, FolderResource | JobResource) and name in ("int_max_cores", "int_max_gpus"):
            vertex, id = (
                ("folder", instance.folder_id) if isinstance(instance, FolderResource) else ("job", instance.job_id)
            )
            payloads.append(
                max_cores_payload(vertex=vertex, id=id, max_centicores=value)
                if name == "int_max_cores"
                else max_gpus_payload(vertex=vertex, id=id, max_gpus=value)
            )
    return payloads


def notify_limit_changes(*, instance: LimitInstance, changed: list[str]) -> None:
    """NOTIFY era: queue the changed caps on this transaction, if the show is scheduler-managed."""
    if not era().sends_notify:
        return
    payloads = limit_change_payloads(instance=instance, changed=changed)
    show_id = limit_fields(instance=instance)[0]
    if not payloads or not Show.objects.filter(pk=show_id, b_scheduler_managed=True).exists():
        return
    with connection.cursor() as cursor:
        notify_send.notify(cursor=cursor, channel=LIMIT_CHANGE, payloads=payloads)


def _apply(instance: L, changes: dict[str, int | None]) -> L:
    LIMIT_CHANGES[type(instance)._meta.db_table].require()
    for name, value in changes.items():
        check_limit(model=type(instance), name=name, value=value)
    with transaction.atomic():
        instance = type(instance).objects.select_for_update().get(pk=instance.pk)
        updates = {name: value for name, value in changes.items() if value is not None}
        for name, value in updates.items():
            setattr(instance, name, value)
        if updates:
            instance.save(update_fields=list(updates))
            notify_limit_changes(instance=instance, changed=list(updates))
            publish_limits_on_commit(instance=instance)
    return instance


def set_subscription_limits(
    *, subscription: Subscription, size: int | None = None, burst: int | None = None
) -> Subscription:
    """size and burst in centicores; None leaves a value as it is."""
    return _apply(subscription, {"int_size": size, "int_burst": burst})


def set_folder_limits(
    *,
    folder_resource: FolderResource,
    min_cores: int | None = None,
    max_cores: int | None = None,
    min_gpus: int | None = None,
    max_gpus: int | None = None,
) -> FolderResource:
    return _apply(
        folder_resource,
        {"int_min_cores": min_cores, "int_max_cores": max_cores, "int_min_gpus": min_gpus, "int_max_gpus": max_gpus},
    )


def set_job_limits(
    *, job_resource: JobResource, max_cores: int | None = None, max_gpus: int | None = None, priority: int | None = None
) -> JobResource:
    return _apply(job_resource, {"int_max_cores": max_cores, "int_max_gpus": max_gpus, "int_priority": priority})


def set_point_limits(*, point: Point, min_cores: int | None = None, min_gpus: int | None = None) -> Point:
    return _apply(point, {"int_min_cores": min_cores, "int_min_gpus": min_gpus})
