"""The publish guardrail: scheduler-managed shows need every instance to publish releases.

An instance that does not publish (ACCOUNTING_REDIS_ENABLED=false) deletes procs of
scheduler-managed shows without telling Redis, so the scheduler's counters only grow.
The guardrail never stops anything: it warns loudly, sets the gauge
cuebot_redis_publish_misconfigured and raises the system check accounting.W001. It runs
at web and task-cluster start and every minute (schedule `accounting_guardrail`), and it
looks at the whole live fleet as well as the process running it.
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

MESSAGE = "scheduler-managed shows exist but Redis publishing is disabled; bookings will silently over-count"


@dataclass(frozen=True)
class GuardrailReport:
    managed_shows: int
    local_publishes: bool
    offenders: list[Instance] = field(default_factory=list)  # live instances that do not publish

    @property
    def misconfigured(self) -> bool:
        return self.managed_shows > 0 and (not self.local_publishes or bool(self.offenders))

    def culprits(self) -> list[str]:
        names = [f"{i.role} {i.host} pid {i.pid} (version {i.version}, last seen {i.last_seen:%Y-%m-%d %H:%M:%S}Z)"
                 for i in self.offenders]
        if not self.local_publishes:
            local = f"this process ({socket.gethostname()} pid {os.getpid()})"
            if not any(i.host == socket.gethostname() and i.pid == os.getpid() for i in self.offenders):
                names.insert(0, local)
        return names


def evaluate(*, now: datetime | None = None) -> GuardrailReport:
    """Read-only: how many shows are managed and which live instances do not publish."""
    managed = count_scheduler_managed_shows()
    offenders = [i for i in live_instances(now=now) if not i.publishes_to_redis] if managed else []
    return GuardrailReport(managed_shows=managed, local_publishes=settings.ACCOUNTING_REDIS_ENABLED, offenders=offenders)


def run_guardrail(*, now: datetime | None = None) -> GuardrailReport:
    """Evaluate, set the gauge and warn. Raises if the database cannot be read."""
    report = evaluate(now=now)
    metrics.PUBLISH_MISCONFIGURED.set(1 if report.misconfigured else 0)
    if report.misconfigured:
        logger.warning("!!! %s: %d scheduler-managed show(s); not publishing: %s",
                       MESSAGE, report.managed_shows, "; ".join(report.culprits()))
    return report


def run_guardrail_at_start() -> None:
    """For process start: a failure to check is logged, never fatal (the service must start)."""
    try:
        run_guardrail()
    except Exception:
        logger.warning("the publish guardrail could not run at start; the every-minute schedule will retry",
                       exc_info=True)
