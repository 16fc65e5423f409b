"""A show's subscriptions as the drift page draws them: booked cores in Redis and in PostgreSQL
against each subscription's size and burst (the Redis era's view)."""

from dataclasses import dataclass

from accounting.live import keys
from accounting.live.units import cores_from_centicores
from accounting.models import Subscription
from accounting.reconcile.redis_against_pg import live_inflight_amounts
from accounting.reconcile.snapshot import booked_rows
from infra.redis_factory import accounting_redis
from shows.models import Show


@dataclass(frozen=True)
class SubscriptionBar:
    """A subscription's booked cores (Redis live, SUM(proc) as Redis counts it) against its size and
    burst; each also as a percentage of the bar, which is as long as the largest of the four."""

    alloc: str
    booked_redis: int | None
    booked_pg: int
    size: int
    burst: int

    def _percent(self, value: int | None) -> float:
        return round(
            100 * max(0, value or 0) / max(self.burst, self.size, self.booked_pg, self.booked_redis or 0, 1), 1
        )

    redis_pct = property(lambda self: self._percent(self.booked_redis))
    pg_pct = property(lambda self: self._percent(self.booked_pg))
    size_pct = property(lambda self: self._percent(self.size))
    burst_pct = property(lambda self: self._percent(self.burst))


def subscription_bars(*, show: Show) -> list[SubscriptionBar]:
    """Per subscription of the show: booked (Redis and PG, cores) against size and burst."""
    booked = {key: cores for key, cores, _, _ in booked_rows(show_ids=[show.id]) if key.startswith("acct:sub:")}
    inflight = live_inflight_amounts()
    client = accounting_redis()
    bars = []
    for sub in Subscription.objects.filter(show=show).select_related("alloc").order_by("alloc__str_name"):
        key = keys.sub(show_id=show.id, alloc_id=sub.alloc_id)
        bars.append(
            SubscriptionBar(
                alloc=sub.alloc.str_name,
                booked_redis=None if (redis_cores := client.hget(key, "int_cores")) is None else int(redis_cores),
                booked_pg=booked.get(key, 0) + inflight.get(key, (0, 0))[0],
                size=cores_from_centicores(sub.int_size),
                burst=cores_from_centicores(sub.int_burst),
            )
        )
    return bars
