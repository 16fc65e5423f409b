"""The farm overview, the admin's front page: per show, its owner, booked against size and burst
per allocation, its drift; the guardrail and the fleet."""

from dataclasses import dataclass
from datetime import datetime

from accounting.live.units import cores_text
from accounting.models import Instance, Subscription
from accounting.operators.booked_sources import PG_ROW, REDIS_LIVE, BookedSources, booked_sources
from accounting.ownership.fleet import live_instances
from accounting.ownership.guardrail import GuardrailReport, evaluate
from accounting.reconcile.drift_check import CheckStatus, ShowCount, check_status
from accounting.reconcile.redis_against_pg import REDIS_FIELDS
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES
from infra.era import era
from shows.models import Show

# --- The farm overview -----------------------------------------------------------------


@dataclass(frozen=True)
class AllocationUse:
    """Booked against size and burst, all in centicores (Redis's whole cores times 100);
    `booked` is None when Redis has no value."""

    alloc: str
    booked: int | None
    size: int
    burst: int
    # Every source of this subscription's booked cores, for the second number and the why.
    sources: BookedSources | None = None

    @property
    def pg_row_cores(self) -> str | None:
        return None if self.sources is None else cores_text(self.sources.pg_row)

    @property
    def scale(self) -> int:
        return max(self.size, self.burst, self.booked or 0, 1)

    def percent(self, value: int | None) -> float:
        return round(100 * max(0, value or 0) / self.scale, 1)

    @property
    def booked_pct(self) -> float:
        return self.percent(self.booked)

    @property
    def size_pct(self) -> float:
        return self.percent(self.size)

    @property
    def burst_pct(self) -> float:
        return self.percent(self.burst)

    @property
    def booked_cores(self) -> str | None:
        return None if self.booked is None else cores_text(self.booked)

    @property
    def size_cores(self) -> str:
        return cores_text(self.size)

    @property
    def burst_cores(self) -> str:
        return cores_text(self.burst)

    @property
    def over(self) -> str:
        """'burst' or 'size' when booked is beyond it, else ''."""
        if self.booked is None:
            return ""
        return "burst" if self.booked > self.burst else "size" if self.booked > self.size else ""


@dataclass(frozen=True)
class ShowOverview:
    show: Show
    owner: str  # who plans and counts it: Cuebot, Maestro (Maestro era, flagged) or Scheduler
    source: str  # where `booked` comes from
    allocations: list[AllocationUse]
    drift: ShowCount | None  # Redis against PostgreSQL; None: not checked (Cuebot counts it, or not yet)
    # Rows of Cuebot's tables off SUM(proc) at the last check, where Cuebot counts the show; None: not checked.
    table_drift: int | None = None

    @property
    def counted_by_cuebot(self) -> bool:
        return self.source != REDIS_LIVE

    @property
    def attention(self) -> tuple[int, int, int, int, float]:
        """How much the show wants an operator's eye, compared as a tuple (the overview lists the
        most first): rows or fields drifted at the last check, allocations missing in Redis,
        beyond their burst, beyond their size; then its fullest allocation's share of its bar."""
        uses = self.allocations
        return (
            (self.table_drift or 0) + (self.drift.drifted if self.drift else 0),
            sum(a.booked is None for a in uses),
            sum(a.over == "burst" for a in uses),
            sum(a.over == "size" for a in uses),
            max((a.booked_pct for a in uses), default=0.0),
        )

    @property
    def needs_attention(self) -> bool:
        """Drifted, missing in Redis, or beyond a size or a burst."""
        return any(self.attention[:4])


@dataclass(frozen=True)
class FarmOverview:
    shows: list[ShowOverview]
    drift: CheckStatus
    guardrail: GuardrailReport
    instances: list[Instance]
    redis_error: str | None = None
    tables_checked_at: datetime | None = None  # the last check of Cuebot's own tables
    counts_in_redis: bool = True  # whether any show's counters live in Redis (not in the Maestro era)


def farm_overview() -> FarmOverview:
    """Per show: owner, booked against size and burst per allocation (Redis live for
    scheduler-managed shows, the PostgreSQL row for Cuebot's; both, and why they differ, for
    the former), drift; the guardrail and the fleet. The shows that need attention come first,
    then the fullest (ShowOverview.attention), by name within a tie."""
    subscriptions = list(
        Subscription.objects.select_related("show", "alloc").order_by("show__str_name", "alloc__str_name")
    )
    # In the Maestro era Cuebot counts every show in its tables and no Redis holds any of them.
    maestro = era().cuebot_owns_every_show
    sources, redis_error = booked_sources(subscriptions=[] if maestro else subscriptions)
    sources |= {
        sub.pk: BookedSources(managed=False, pg_row=sub.int_cores, redis=None)
        for sub in subscriptions
        if sub.pk not in sources
    }
    status, tables = check_status(REDIS_FIELDS), check_status(CUEBOT_TABLES)
    per_show = _allocations_by_show(subscriptions=subscriptions, sources=sources, maestro=maestro)
    shows = [
        _show_overview(show=show, allocations=per_show.get(show.pk, []), status=status, tables=tables, maestro=maestro)
        for show in Show.objects.order_by("str_name")
    ]
    shows.sort(key=lambda entry: entry.attention, reverse=True)  # stable: by name within a tie
    return FarmOverview(
        shows=shows,
        drift=status,
        guardrail=evaluate(),
        instances=live_instances(),
        redis_error=redis_error,
        tables_checked_at=tables.checked_at,
        counts_in_redis=not maestro,
    )


def _allocations_by_show(
    *, subscriptions: list[Subscription], sources: dict[str, BookedSources], maestro: bool
) -> dict[str, list[AllocationUse]]:
    per_show: dict[str, list[AllocationUse]] = {}
    for sub in subscriptions:
        source = sources[sub.pk]
        booked = source.redis if sub.show.b_scheduler_managed and not maestro else source.pg_row
        # A burst of -1 is no "unlimited" (Cuebot compares it as a number): nothing books beyond 0.
        per_show.setdefault(sub.show_id, []).append(
            AllocationUse(
                alloc=sub.alloc.str_name, booked=booked, size=sub.int_size, burst=max(sub.int_burst, 0), sources=source
            )
        )
    return per_show


def _show_overview(
    *, show: Show, allocations: list[AllocationUse], status: CheckStatus, tables: CheckStatus, maestro: bool
) -> ShowOverview:
    by_scheduler = show.b_scheduler_managed and not maestro
    return ShowOverview(
        show=show,
        owner="Scheduler" if by_scheduler else "Maestro" if show.b_scheduler_managed else "Cuebot",
        source=REDIS_LIVE if by_scheduler else f"{PG_ROW} (Cuebot's count)",
        allocations=allocations,
        drift=status.shows.get(show.pk) if by_scheduler else None,
        table_drift=None if by_scheduler else tables.drifted(show.pk),
    )
