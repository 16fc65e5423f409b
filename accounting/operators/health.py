"""Plain Django views outside the JSON API: Prometheus scraping and health checks."""

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from django_redis import get_redis_connection

from accounting.usage import gauges
from infra.era import era
from infra.metrics import counter_total, note_redis_master, render
from infra.redis_factory import accounting_redis, master_address


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    body, content_type = render(at_scrape=[gauges.scraped])
    return HttpResponse(body, content_type=content_type)


def _check(probe) -> str:
    try:
        probe()
    except Exception as error:  # noqa: BLE001 - any failure means unreachable, reported by name
        return f"error: {type(error).__name__}: {error}"
    return "ok"


def _postgres() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """200 when PostgreSQL and every Redis the release path uses answer, else 503 (the cache is
    PostgreSQL's own table where no CACHE_REDIS_URL is set, in the Maestro era)."""
    checks = {"postgres": _check(_postgres)}
    if settings.CACHE_REDIS_URL:
        checks["cache_redis"] = _check(lambda: get_redis_connection("default").ping())
    body = {}
    if era().keeps_redis:
        checks["accounting_redis"] = _check(lambda: accounting_redis().ping())
        body["accounting_redis"] = _accounting_master()
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "checks": checks, **body}, status=200 if healthy else 503
    )


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
