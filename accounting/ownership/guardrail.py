"""The guardrail: every scheduler-managed show is booked by someone and counted by everyone.

Two ways a flagged show goes wrong, both named with their fix:

Stranded, in every era: Cuebot's dispatcher skips flagged shows, so only the scheduler books
them (Maestro, inside Cuebot, in the Maestro era; the Rust scheduler before). A flagged show
with waiting frames and no proc booked for ACCOUNTING_STRANDED_MINUTES is booked by nobody
(OpenCue's release notes: "otherwise they will stop booking").

Not published, in the Redis and NOTIFY eras only: a release of a flagged show reaches the
scheduler as a Lua script in Redis after commit or a pg_notify in the transaction. An instance
that does not publish the way the rest of the fleet does deletes procs without telling that
scheduler, whose counters then only grow (it under-books until its next recompute or reseed).
The fleet's eras are those any live instance (this one included) publishes on. In the Maestro
era Cuebot keeps the five tables for every show and Maestro reads them each tick: there is
nothing to publish, and flagged shows are fine as long as Maestro plans them.

The guardrail never stops anything: it warns loudly, sets the gauges
cuebot_redis_publish_misconfigured and cuebot_acct_stranded_show{show} and raises the system
check accounting.W001 (publishing). It runs at web and task-cluster start and every minute
(schedule `accounting_guardrail`), and it looks at the whole live fleet as well as the
process running it.
"""

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from accounting.models import Instance
from accounting.ownership.fleet import live_instances
from infra import metrics
from infra.era import Era, era, told_by
from shows.selectors import StrandedShow, count_scheduler_managed_shows, stranded_shows

logger = logging.getLogger(__name__)

MESSAGE = (
    "scheduler-managed shows exist but an instance does not tell the scheduler of its releases the way the "
    "fleet does (Redis, NOTIFY); bookings will silently over-count"
)
ERA_NAMES = {"redis": "Redis", "notify": "NOTIFY"}
# The shows last seen stranded, fleet-wide: the process that finds one no longer stranded sets its series to 0.
STRANDED_CACHE_KEY = "guardrail:stranded_shows"


def era_names(eras: frozenset[str]) -> str:
    return ", ".join(ERA_NAMES[e] for e in sorted(eras)) or "nothing"


def stranded_fix(*, show: str, era: Era) -> str:
    """What to do about a stranded show, in one sentence: start what books flagged shows, or clear the flag."""
    return f"nothing books show {show}: {era.start_flagged_booker} or clear its flag: set_scheduler_managed {show} off"


@dataclass(frozen=True)
class GuardrailReport:
    managed_shows: int
    era: Era  # this process's (infra.era)
    local: frozenset[str]  # the eras this process publishes on
    fleet: frozenset[str]  # the eras any live instance publishes on, this one included
    stranded_minutes: int  # ACCOUNTING_STRANDED_MINUTES, as evaluated
    offenders: list[Instance] = field(default_factory=list)  # live instances missing one of the fleet's eras
    stranded: list[StrandedShow] = field(default_factory=list)

    @property
    def publishes(self) -> bool:
        """Whether releases must reach a scheduler at all: not in the Maestro era."""
        return bool(self.era.release_told)

    @property
    def local_offends(self) -> bool:
        return self.local != self.fleet

    @property
    def misconfigured(self) -> bool:
        return self.publishes and self.managed_shows > 0 and (self.local_offends or bool(self.offenders))

    @property
    def failing(self) -> bool:
        return self.misconfigured or bool(self.stranded)

    @property
    def fleet_names(self) -> str:
        return era_names(self.fleet)

    @property
    def hint(self) -> str:
        wanted = told_by(self.fleet)
        return (
            f"{self.managed_shows} show(s) are scheduler-managed. Set ACCOUNTING_SCHEDULER={wanted} on: "
            + "; ".join(self.culprits())
        )

    def culprits(self) -> list[str]:
        names = [
            f"{i.role} {i.host} pid {i.pid} (version {i.version}, last seen {i.last_seen:%Y-%m-%d %H:%M:%S}Z, "
            f"publishes {era_names(i.eras)})"
            for i in self.offenders
        ]
        if self.local_offends:
            local = f"this process ({socket.gethostname()} pid {os.getpid()}, publishes {era_names(self.local)})"
            if not any(i.host == socket.gethostname() and i.pid == os.getpid() for i in self.offenders):
                names.insert(0, local)
        return names

    def stranded_fixes(self) -> list[str]:
        return [stranded_fix(show=show.name, era=self.era) for show in self.stranded]


def evaluate(*, now: datetime | None = None) -> GuardrailReport:
    """Read-only: how many shows are managed, which of them nothing books, the fleet's eras and who misses one."""
    now = now or timezone.now()
    managed = count_scheduler_managed_shows()
    current = era()
    local = current.release_told
    instances = live_instances(now=now) if managed and local else []
    fleet = local.union(*(i.eras for i in instances))
    offenders = [i for i in instances if not i.eras or i.eras != fleet]
    minutes = settings.ACCOUNTING_STRANDED_MINUTES
    stranded = stranded_shows(since=now - timedelta(minutes=minutes)) if managed else []
    return GuardrailReport(
        managed_shows=managed,
        era=current,
        local=local,
        fleet=fleet,
        offenders=offenders,
        stranded=stranded,
        stranded_minutes=minutes,
    )


def _set_stranded_gauge(*, report: GuardrailReport) -> None:
    names = {show.name for show in report.stranded}
    for name in set(cache.get(STRANDED_CACHE_KEY) or ()) - names:
        metrics.STRANDED_SHOW.labels(show=name).set(0)
    for name in names:
        metrics.STRANDED_SHOW.labels(show=name).set(1)
    cache.set(STRANDED_CACHE_KEY, sorted(names), timeout=None)


def run_guardrail(*, now: datetime | None = None) -> GuardrailReport:
    """Evaluate, set the gauges and warn. Raises if the database cannot be read."""
    report = evaluate(now=now)
    metrics.PUBLISH_MISCONFIGURED.set(1 if report.misconfigured else 0)
    _set_stranded_gauge(report=report)
    if report.misconfigured:
        logger.warning(
            "!!! %s: %d scheduler-managed show(s); the fleet publishes on %s; not publishing so: %s",
            MESSAGE,
            report.managed_shows,
            era_names(report.fleet),
            "; ".join(report.culprits()),
        )
    for fix in report.stranded_fixes():
        logger.warning(
            "!!! stranded: waiting frames and no proc booked for %d minutes; %s", report.stranded_minutes, fix
        )
    return report


def run_guardrail_at_start() -> None:
    """For process start: a failure to check is logged, never fatal (the service must start)."""
    try:
        run_guardrail()
    except Exception:
        logger.warning(
            "the publish guardrail could not run at start; the every-minute schedule will retry", exc_info=True
        )
