"""The admin's usage page: a period, a grouping and buckets asked in a form; the report's rows in a
table; a chart of core-hours used against promised per show (or allocation); and a link to the
same rows as CSV, which this view answers itself (the API's needs a token, the page a login).
Open to any staff user, as the overview and the drift pages are."""

import csv
import io
from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import mark_safe

from accounting.operators.usage_faces import Refusal, chart_bars, chart_key, report_notes, usage_or_refusal
from accounting.usage.report import KEYS, PERIODS, report_csv

# A page opened without a query shows the last week (today included), per show and allocation:
# the grouping that carries the promise.
DEFAULT_DAYS = 7
DEFAULT_BY = ("show", "allocation")
# Bars beyond these would make the chart longer than the table it sums; the biggest come first.
CHARTED_BARS = 30


def usage_page(request: HttpRequest) -> HttpResponse:
    asked = _asked(request)
    found = usage_or_refusal(since=asked["since"], until=asked["until"], by=asked["by"], per=asked["per"])
    if request.GET.get("format") == "csv" and not isinstance(found, Refusal):
        response = HttpResponse(report_csv(found), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="usage-{asked["since"]}-{asked["until"]}.csv"'
        return response
    context = {
        **admin.site.each_context(request),
        "title": "Usage: used against promised",
        "TIME_ZONE": settings.TIME_ZONE,
        "asked": asked,
        "keys": [(key, key in asked["by"].split(",")) for key in KEYS],
        "periods": PERIODS,
        "refusal": found if isinstance(found, Refusal) else None,
        "report": None if isinstance(found, Refusal) else found,
        "csv_query": urlencode({**asked, "format": "csv"}),
    }
    if context["report"] is not None:
        context |= _table(report=found) | _chart(report=found, by=asked["by"].split(","))
    return render(request, "admin/accounting/usage.html", context)


def _asked(request: HttpRequest) -> dict[str, str]:
    """The query as the form sends it (`by` one checkbox a key, joined as the command takes it),
    or the last week by show and allocation when nothing is asked."""
    today = timezone.localdate()
    if "since" not in request.GET:
        return {
            "since": (today - timedelta(days=DEFAULT_DAYS - 1)).isoformat(),
            "until": (today + timedelta(days=1)).isoformat(),
            "by": ",".join(DEFAULT_BY),
            "per": "",
        }
    return {
        "since": request.GET.get("since", "").strip(),
        "until": request.GET.get("until", "").strip(),
        "by": ",".join(part for value in request.GET.getlist("by") for part in value.split(",") if part) or "show",
        "per": request.GET.get("per", "").strip(),
    }


def _table(*, report) -> dict:
    """The table is the CSV laid out: the same header and the same cells, so that the CSV link
    downloads exactly what the page shows."""
    header, *rows = csv.reader(io.StringIO(report_csv(report)))
    # A line may break after an underscore: nine column names on one line ran past the page.
    breakable = [mark_safe("_<wbr>".join(escape(part) for part in name.split("_"))) for name in header]
    return {"header": breakable, "table_rows": rows, "notes": report_notes(report=report)}


def _chart(*, report, by: list[str]) -> dict:
    key = chart_key(by=by)
    if key is None:
        return {"chart_key": None}
    bars = chart_bars(rows=report.rows, key=key)
    return {"chart_key": key, "bars": bars[:CHARTED_BARS], "bars_left": max(0, len(bars) - CHARTED_BARS)}
