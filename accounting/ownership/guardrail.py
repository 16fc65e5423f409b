"""The publish guardrail: scheduler-managed shows need every instance to tell the scheduler.

A release of a scheduler-managed show reaches the scheduler one of two ways, one per OpenCue
era: a Lua script in Redis after commit (ACCOUNTING_REDIS_ENABLED) or a pg_notify in the
transaction (ACCOUNTING_NOTIFY_ENABLED). An instance that does not publish the way the rest
of the fleet does deletes procs without telling that scheduler, whose counters then only grow
(it under-books until its next recompute or reseed). The fleet's eras are those any live
instance (this one included) publishes on; an instance missing one of them, or publishing on
none, is named.

The guardrail never stops anything: it warns loudly, sets the gauge
cuebot_redis_publish_misconfigured (and, when this process sends nothing at all,
cuebot_accounting_notify_disabled, the name OpenCue documents for that) and raises the
system check accounting.W001. It runs at web and task-cluster start and every minute
(schedule `accounting_guardrail`), and it looks at the whole live fleet as well as the
process running it.
"""
import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings

from accounting.models import Instance
from accounting.ownership.fleet import live_instances
from cuebot_acct import metrics
from shows.selectors import count_scheduler_managed_shows

logger = logging.getLogger(__name__)

MESSAGE = ("scheduler-managed shows exist but an instance does not tell the scheduler of its releases the way the "
           "fleet does (Redis, NOTIFY); bookings will silently over-count")
ERA_NAMES = {"redis": "Redis", "notify": "NOTIFY"}
ERA_SETTINGS = {"redis": "ACCOUNTING_REDIS_ENABLED", "notify": "ACCOUNTING_NOTIFY_ENABLED"}


def local_eras() -> frozenset[str]:
    return frozenset(era for era, setting in ERA_SETTINGS.items() if getattr(settings, setting))


def era_names(eras: frozenset[str]) -> str:
    return ", ".join(ERA_NAMES[e] for e in sorted(eras)) or "nothing"


@dataclass(frozen=True)
class GuardrailReport:
    managed_shows: int
    local: frozenset[str]  # the eras this process publishes on
    fleet: frozenset[str]  # the eras any live instance publishes on, this one included
    offenders: list[Instance] = field(default_factory=list)  # live instances missing one of the fleet's eras

    @property
    def local_offends(self) -> bool:
        return not self.local or self.local != self.fleet

    @property
    def misconfigured(self) -> bool:
        return self.managed_shows > 0 and (self.local_offends or bool(self.offenders))

    @property
    def fleet_names(self) -> str:
        return era_names(self.fleet)

    @property
    def hint(self) -> str:
        wanted = " and ".join(f"{ERA_SETTINGS[e]}=true" for e in sorted(self.fleet)) or \
            "ACCOUNTING_REDIS_ENABLED=true (Redis-era scheduler) or ACCOUNTING_NOTIFY_ENABLED=true (NOTIFY-era scheduler)"
        return f"{self.managed_shows} show(s) are scheduler-managed. Set {wanted} on: " + "; ".join(self.culprits())

    def culprits(self) -> list[str]:
        names = [f"{i.role} {i.host} pid {i.pid} (version {i.version}, last seen {i.last_seen:%Y-%m-%d %H:%M:%S}Z, "
                 f"publishes {era_names(i.eras)})" for i in self.offenders]
        if self.local_offends:
            local = f"this process ({socket.gethostname()} pid {os.getpid()}, publishes {era_names(self.local)})"
            if not any(i.host == socket.gethostname() and i.pid == os.getpid() for i in self.offenders):
                names.insert(0, local)
        return names


def evaluate(*, now: datetime | None = None) -> GuardrailReport:
    """Read-only: how many shows are managed, the fleet's eras and who misses one."""
    managed = count_scheduler_managed_shows()
    local = local_eras()
    instances = live_instances(now=now) if managed else []
    fleet = local.union(*(i.eras for i in instances))
    offenders = [i for i in instances if not i.eras or i.eras != fleet]
    return GuardrailReport(managed_shows=managed, local=local, fleet=fleet, offenders=offenders)


def run_guardrail(*, now: datetime | None = None) -> GuardrailReport:
    """Evaluate, set the gauges and warn. Raises if the database cannot be read."""
    report = evaluate(now=now)
    metrics.PUBLISH_MISCONFIGURED.set(1 if report.misconfigured else 0)
    silent = report.managed_shows > 0 and not report.local
    metrics.NOTIFY_DISABLED.set(1 if silent else 0)
    if silent:
        logger.warning("ACCOUNTING_NOTIFY_ENABLED=false and ACCOUNTING_REDIS_ENABLED=false but %d scheduler-managed "
                       "show(s) exist: the scheduler hears none of this instance's releases and relies on its periodic "
                       "recompute (it under-books meanwhile), and a cap lowered here is not enforced until its limit "
                       "reseed", report.managed_shows)
    if report.misconfigured:
        logger.warning("!!! %s: %d scheduler-managed show(s); the fleet publishes on %s; not publishing so: %s",
                       MESSAGE, report.managed_shows, era_names(report.fleet), "; ".join(report.culprits()))
    return report


def run_guardrail_at_start() -> None:
    """For process start: a failure to check is logged, never fatal (the service must start)."""
    try:
        run_guardrail()
    except Exception:
        logger.warning("the publish guardrail could not run at start; the every-minute schedule will retry",
                       exc_info=True)
