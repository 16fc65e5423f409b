"""Plain Django views outside the JSON API: Prometheus scraping and the health check."""

import logging

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from django_redis import get_redis_connection

from accounting.models import Instance
from accounting.ownership.fleet import HEARTBEAT_SECONDS, STALE_AFTER, last_heartbeat
from accounting.usage import gauges
from infra import __version__
from infra.cuebot_database import apart, cuebot_connection, cuebot_url
from infra.era import era
from infra.metrics import counter_total, gauge_text, note_redis_master, render
from infra.redis_factory import accounting_redis, master_address

logger = logging.getLogger(__name__)

TASK_CLUSTER_HEARTBEAT = "cuebot_acct_task_cluster_last_heartbeat_timestamp_seconds"


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    body, content_type = render(at_scrape=[gauges.scraped, gauges.replay_lag, task_cluster_heartbeat])
    return HttpResponse(body, content_type=content_type)


def task_cluster_heartbeat() -> bytes:
    """When a task worker last recorded itself, anywhere in the fleet (0 if none ever did), read at
    each scrape so that it keeps aging while the cluster is gone: CuebotAcctTaskClusterDown."""
    try:
        last = last_heartbeat(role=Instance.Role.TASKS)
    except DatabaseError as error:
        logger.warning("task cluster heartbeat: not read (%s); left out of this scrape", error)
        return b""
    return gauge_text(
        name=TASK_CLUSTER_HEARTBEAT,
        text="When a task worker (manage.py qcluster) last recorded itself, in seconds since the epoch; "
        "0 if none ever did.",
        value=last.timestamp() if last else 0.0,
    )


def _check(probe) -> str:
    try:
        probe()
    except Exception as error:  # noqa: BLE001 - any failure means unreachable, reported by name
        return f"error: {type(error).__name__}: {error}"
    return "ok"


def _postgres() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _cuebot_postgres() -> None:
    with cuebot_connection().cursor() as cursor:
        cursor.execute("SELECT 1")


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL answers, the task cluster is alive and every Redis the release path uses
    answers, else 503 naming each part that is down (the cache is PostgreSQL's own table where no
    CACHE_REDIS_URL is set, in the Maestro era). The task cluster is the fleet's: while it is down,
    every web instance answers 503. Where Cuebot's tables are read from a database apart
    (CUEBOT_DATABASE_URL), it is checked by its own name, which the body gives."""
    checks = {"postgres": _check(_postgres)}
    checks["task_cluster"] = (
        _task_cluster()
        if checks["postgres"] == "ok"
        else "unknown: it records itself in PostgreSQL, which does not answer"
    )
    body: dict[str, object] = {}
    if apart():
        checks["cuebot_postgres"] = _check(_cuebot_postgres)
        body["cuebot_database"] = cuebot_url()
    if settings.CACHE_REDIS_URL:
        checks["cache_redis"] = _check(lambda: get_redis_connection("default").ping())
    if era().keeps_redis:
        checks["accounting_redis"] = _check(lambda: accounting_redis().ping())
        body["accounting_redis"] = _accounting_master()
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "version": __version__, "checks": checks, **body},
        status=200 if healthy else 503,
    )


def _task_cluster() -> str:
    """The task cluster (drift check, guardrail, recalculate_subs) is alive while one of its workers
    has recorded itself within STALE_AFTER, on whichever host it runs."""
    last = last_heartbeat(role=Instance.Role.TASKS)
    if last is None:
        return "error: no task cluster worker has ever recorded itself (is manage.py qcluster running?)"
    age = (timezone.now() - last).total_seconds()
    if age > STALE_AFTER.total_seconds():
        return (
            f"error: the task cluster last recorded itself {age:.0f} s ago, at {last.isoformat(timespec='seconds')} "
            f"(every {HEARTBEAT_SECONDS} s while it runs)"
        )
    return "ok"


def _accounting_master() -> dict:
    """Which master the accounting client writes to, and the failovers and rebuilds counted."""
    try:
        master = master_address(accounting_redis())
        note_redis_master(address=master)
    except Exception as error:  # noqa: BLE001 - no master known right now (between masters): said, not raised
        master = f"error: {type(error).__name__}: {error}"
    return {
        "master": master,
        "failovers": int(counter_total("cuebot_acct_redis_failovers_total")),
        "rebuilds": int(counter_total("cuebot_acct_redis_rebuilds_total")),
    }
