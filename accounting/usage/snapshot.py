"""What the farm holds against what it was promised, read from Cuebot's tables in one statement:
per subscription its booked cores and GPUs, size and burst; per allocation the cores and GPUs of
its hosts and how many of them are idle; per show its owner flag. For the subscription gauges
(accounting.usage.gauges), under the observer's grants: SELECT on subscription, show, alloc,
facility and host, each in `shows.attach.grant_statements(writes=False)`.

Booked is what the scheduler of the site's era books against, as the admin's overview says
(accounting.operators.overview.farm_overview): the subscription row (Cuebot's count) for every
show in the Maestro era, and for the shows Cuebot counts in the others; for a scheduler-managed
show in the Redis and NOTIFY eras the accounting Redis's `acct:sub` hash, in the whole cores the
scheduler counts, and nothing where Redis holds no value or cannot be read (the overview shows
none there either).

Allocations are OpenCue's AllocationStats: `cores` and `idle_cores` are the sums of its hosts'
`int_cores` and `int_cores_idle`, whatever their state, and the same for GPUs.
"""

import logging
from dataclasses import dataclass

import redis
from django.db import connection, transaction

from accounting.live import keys
from accounting.live.units import centicores_from_cores
from infra.era import era
from infra.redis_factory import accounting_redis

logger = logging.getLogger(__name__)

# A scrape neither waits on a lock for long (a Flyway migration's ALTER TABLE host, say) nor holds
# a web worker while it does: past this the read is cancelled and the series left out of the scrape.
READ_TIMEOUT_MS = 2000

# One statement, so one snapshot: a booking or a release (its proc, its host and its subscription
# written in one transaction) is in every number of a scrape or in none. A row's kind says which of
# the three shapes it has; the four amounts are (booked cores, booked GPUs, size, burst) of a
# subscription and (cores, GPUs, idle cores, idle GPUs) of an allocation.
SNAPSHOT = """
SELECT 'subscription', sh.str_name, a.str_name, f.str_name,
       s.int_cores::bigint, s.int_gpus::bigint, s.int_size, s.int_burst,
       sh.b_scheduler_managed, s.pk_show, s.pk_alloc
  FROM subscription s
  JOIN show sh ON sh.pk_show = s.pk_show
  JOIN alloc a ON a.pk_alloc = s.pk_alloc
  JOIN facility f ON f.pk_facility = a.pk_facility
UNION ALL
SELECT 'allocation', NULL, a.str_name, f.str_name,
       COALESCE(h.cores, 0), COALESCE(h.gpus, 0), COALESCE(h.idle_cores, 0), COALESCE(h.idle_gpus, 0),
       NULL, NULL, NULL
  FROM alloc a
  JOIN facility f ON f.pk_facility = a.pk_facility
  LEFT JOIN (
        SELECT pk_alloc, SUM(int_cores)::bigint AS cores, SUM(int_gpus)::bigint AS gpus,
               SUM(int_cores_idle)::bigint AS idle_cores, SUM(int_gpus_idle)::bigint AS idle_gpus
          FROM host
         GROUP BY pk_alloc
       ) h ON h.pk_alloc = a.pk_alloc
UNION ALL
SELECT 'show', sh.str_name, NULL, NULL, NULL, NULL, NULL, NULL, sh.b_scheduler_managed, NULL, NULL
  FROM show sh
"""


@dataclass(frozen=True)
class SubscriptionUse:
    """Centicores (GPUs whole) as stored; `booked` and `booked_gpus` are None where the era's
    source has no value (a scheduler-managed show whose Redis hash is missing or unreadable)."""

    show: str
    allocation: str
    facility: str
    booked: int | None
    booked_gpus: int | None
    size: int
    burst: int


@dataclass(frozen=True)
class AllocationHosts:
    """The sums over the allocation's hosts, centicores (GPUs whole)."""

    allocation: str
    facility: str
    cores: int
    gpus: int
    idle_cores: int
    idle_gpus: int


@dataclass(frozen=True)
class Usage:
    subscriptions: list[SubscriptionUse]
    allocations: list[AllocationHosts]
    scheduler_managed: dict[str, bool]  # show name -> its owner flag


def read_usage() -> Usage:
    """The snapshot; in the Redis and NOTIFY eras, the scheduler-managed shows' booked amounts
    then read from Redis in one pipeline."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(READ_TIMEOUT_MS)])
        cursor.execute(SNAPSHOT)
        rows = cursor.fetchall()
    from_redis = _booked_in_redis(rows=rows) if not era().cuebot_owns_every_show else {}
    subscriptions, allocations, managed = [], [], {}
    for kind, show, allocation, facility, *amounts, flagged, show_id, alloc_id in rows:
        if kind == "subscription":
            # Only a scheduler-managed show's, outside the Maestro era, are read from Redis.
            booked, booked_gpus = from_redis.get((show_id, alloc_id), amounts[:2])
            subscriptions.append(SubscriptionUse(show, allocation, facility, booked, booked_gpus, *amounts[2:]))
        elif kind == "allocation":
            allocations.append(AllocationHosts(allocation, facility, *amounts))
        else:
            managed[show] = flagged
    return Usage(subscriptions=subscriptions, allocations=allocations, scheduler_managed=managed)


def _booked_in_redis(*, rows: list[tuple]) -> dict[tuple[str, str], tuple[int | None, int | None]]:
    """(show id, alloc id) -> (centicores, GPUs) of each scheduler-managed show's subscription,
    from its acct:sub hash; (None, None) for every one when Redis cannot be read."""
    wanted = [(row[9], row[10]) for row in rows if row[0] == "subscription" and row[8]]
    if not wanted:
        return {}
    try:
        pipe = accounting_redis().pipeline(transaction=False)
        for show_id, alloc_id in wanted:
            pipe.hmget(keys.sub(show_id=show_id, alloc_id=alloc_id), "int_cores", "int_gpus")
        values = pipe.execute()
    except (redis.RedisError, OSError) as error:
        logger.warning("subscription gauges: the accounting Redis could not be read (%s); booked left out", error)
        return dict.fromkeys(wanted, (None, None))
    return {
        pair: (None if cores is None else centicores_from_cores(int(cores)), None if gpus is None else int(gpus))
        for pair, (cores, gpus) in zip(wanted, values, strict=True)
    }
