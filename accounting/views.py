"""Plain Django views outside the JSON API: Prometheus scraping and health checks."""
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET
from django_redis import get_redis_connection

from accounting.metrics import render
from cuebot_acct.redis_factory import accounting_redis


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    body, content_type = render()
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
    """200 when PostgreSQL and every Redis the release path uses answer, else 503."""
    checks = {"postgres": _check(_postgres), "cache_redis": _check(lambda: get_redis_connection("default").ping())}
    if settings.ACCOUNTING_REDIS_ENABLED:
        checks["accounting_redis"] = _check(lambda: accounting_redis().ping())
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse({"status": "ok" if healthy else "unavailable", "checks": checks}, status=200 if healthy else 503)
