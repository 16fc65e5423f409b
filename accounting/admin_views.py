"""Admin pages of the drift inspector: one per scheduler-managed show, with a chart of
booked cores (Redis and PostgreSQL) against size and burst per subscription."""
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from accounting.drift import drift_report, subscription_bars
from shows.models import Show


def _percent(value: int | None, scale: int) -> float:
    return round(100 * max(0, value or 0) / scale, 1) if scale else 0.0


def drift_index(request: HttpRequest) -> HttpResponse:
    shows = Show.objects.filter(b_scheduler_managed=True).order_by("str_name")
    return render(request, "admin/accounting/drift_index.html", {**admin.site.each_context(request), "title": "Accounting drift", "shows": shows})


def drift_show(request: HttpRequest, show_id: str) -> HttpResponse:
    show = get_object_or_404(Show, pk=show_id)
    report = drift_report(show_ids=[show.id])
    bars = []
    for bar in subscription_bars(show=show):
        scale = max(bar.burst, bar.size, bar.booked_pg, bar.booked_redis or 0, 1)
        bars.append({
            "bar": bar,
            "redis_pct": _percent(bar.booked_redis, scale),
            "pg_pct": _percent(bar.booked_pg, scale),
            "size_pct": _percent(bar.size, scale),
            "burst_pct": _percent(bar.burst, scale),
        })
    context = {**admin.site.each_context(request), "title": f"Accounting drift: {show.str_name}", "show": show,
               "report": report, "bars": bars}
    return render(request, "admin/accounting/drift_show.html", context)
