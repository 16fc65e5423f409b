"""Each booked number with its source (Redis live, the PostgreSQL row, SUM(proc) now) and, where
two sources differ, why."""

from collections.abc import Sequence
from dataclasses import dataclass

import redis
from django.db.models import F, Sum

from accounting.live import keys
from accounting.live.units import centicores_from_cores, cores_text, format_cores
from accounting.models import Proc, Subscription
from infra.era import era
from infra.redis_factory import accounting_redis

# --- Booked cores: where each number comes from ------------------------------------------
#
# A subscription's booked cores can be read in three places, which legitimately differ:
# Redis (what the scheduler books against, for a scheduler-managed show: whole cores, each
# proc truncated), the PostgreSQL row (Cuebot's own count for a Cuebot-managed show; for a
# scheduler-managed one only as fresh as the last recompute) and SUM(proc) (the truth, now).
# Every page labels its numbers with these names, and where it shows two that differ it
# says which of rounding, recompute lag and drift makes the difference.

REDIS_LIVE = "Redis live"
PG_ROW = "PostgreSQL row"
PROC_NOW = "SUM(proc) now"

ROUNDING = "rounding"
RECOMPUTE_LAG = "recompute lag"
DRIFT = "drift"


@dataclass(frozen=True)
class BookedReason:
    kind: str  # ROUNDING, RECOMPUTE_LAG or DRIFT
    text: str
    short: str  # the same numbers in a few words, for a list's cell (the text goes in its tooltip)


@dataclass(frozen=True)
class BookedSources:
    """One subscription's booked cores from each source, in centicores. `redis` is None where
    Redis holds nothing for it (a Cuebot-managed show), has no value, or could not be read;
    `proc_exact`/`proc_per_proc` (SUM(proc) now, and summed after truncating each proc as
    Redis counts) are read only where Redis and the row differ, to say why."""

    managed: bool
    pg_row: int
    redis: int | None
    proc_exact: int | None = None
    proc_per_proc: int | None = None

    @property
    def differ(self) -> bool:
        return self.managed and self.redis is not None and self.redis != self.pg_row

    @property
    def reasons(self) -> list[BookedReason]:
        """Why Redis and the row differ, each part in cores; [] where they agree."""
        if not self.differ or self.proc_exact is None or self.proc_per_proc is None or self.redis is None:
            return []
        exact, per_proc, row = (
            format_cores(self.proc_exact),
            format_cores(self.proc_per_proc),
            format_cores(self.pg_row),
        )
        off = self.redis - self.proc_per_proc
        above = f"{format_cores(abs(off))} {'above' if off > 0 else 'below'} {PROC_NOW}"
        candidates = [
            (
                self.proc_exact != self.proc_per_proc,
                ROUNDING,
                f"Redis truncates each proc's cores to whole cores: the procs reserve {exact}, which Redis counts as {per_proc}",
                f"{exact} reserved, Redis counts {cores_text(self.proc_per_proc)}",
            ),
            (
                self.pg_row != self.proc_exact,
                RECOMPUTE_LAG,
                f"the PostgreSQL row ({row}) is as of the last recompute; {PROC_NOW} is {exact}",
                f"row {row}, {PROC_NOW} {cores_text(self.proc_exact)}",
            ),
            (
                off != 0,
                DRIFT,
                f"Redis is {above} counted per proc: an operation in flight, or drift (the drift page tells which)",
                f"Redis {above}",
            ),
        ]
        return [BookedReason(kind, text, short) for applies, kind, text, short in candidates if applies]


def _proc_sums(subscriptions: Sequence[Subscription]) -> dict[tuple[str, str], tuple[int, int]]:
    """(show, alloc) -> (SUM(proc) in centicores, the same summed per proc in whole cores x 100),
    counting as the subscription does: non-local procs, by their host's allocation."""
    if not subscriptions:
        return {}
    rows = (
        Proc.objects.filter(show_id__in={s.show_id for s in subscriptions}, b_local=False)
        .values("show_id", "host__alloc_id")
        .annotate(exact=Sum("int_cores_reserved"), per_proc=Sum(F("int_cores_reserved") / 100))
    )
    return {(r["show_id"], r["host__alloc_id"]): (int(r["exact"]), int(r["per_proc"]) * 100) for r in rows}


def booked_sources(*, subscriptions: Sequence[Subscription]) -> tuple[dict[str, BookedSources], str | None]:
    """Per subscription id, its booked cores by source; and the Redis error, if Redis could not
    be read. One Redis pipeline for the scheduler-managed ones; one PostgreSQL aggregate for
    those whose Redis value and row differ (to say why), none when none differs. In the Maestro era
    Cuebot counts every show in its row; only the redis era has counters in Redis to read."""
    by_scheduler = {s.pk: not era().cuebot_owns(flagged=s.show.b_scheduler_managed) for s in subscriptions}
    managed = [s for s in subscriptions if by_scheduler[s.pk]]
    from_redis, error = _redis_booked(managed) if era().keeps_redis else ({}, None)
    sources = {}
    for sub in subscriptions:
        cores = from_redis.get(sub.pk)
        sources[sub.pk] = BookedSources(
            managed=by_scheduler[sub.pk],
            pg_row=sub.int_cores,
            redis=None if cores is None else centicores_from_cores(cores),
        )
    differing = [s for s in subscriptions if sources[s.pk].differ]
    sums = _proc_sums(differing)
    for sub in differing:
        exact, per_proc = sums.get((sub.show_id, sub.alloc_id), (0, 0))
        sources[sub.pk] = BookedSources(
            managed=True, pg_row=sub.int_cores, redis=sources[sub.pk].redis, proc_exact=exact, proc_per_proc=per_proc
        )
    return sources, error


def _redis_booked(subscriptions: list[Subscription]) -> tuple[dict[str, int | None], str | None]:
    """int_cores of each managed subscription's key, one pipeline; ({}, error) if Redis fails."""
    if not subscriptions:
        return {}, None
    try:
        pipe = accounting_redis().pipeline(transaction=False)
        for sub in subscriptions:
            pipe.hget(keys.sub(show_id=sub.show_id, alloc_id=sub.alloc_id), "int_cores")
        values = pipe.execute()
    except (redis.RedisError, OSError) as error:
        return {}, f"{type(error).__name__}: {error}"
    return {sub.pk: None if v is None else int(v) for sub, v in zip(subscriptions, values, strict=True)}, None
