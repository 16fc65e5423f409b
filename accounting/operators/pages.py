"""The operator's pages beside the model admin: the farm overview (the admin's front page),
the drift index (every show at the last checks, and every row they found drifted, since when and
for how long), a show's drift read now (Cuebot's tables where Cuebot owns its rows, every show in
the Maestro era; its Redis fields in the redis era), and its two repairs, each after a confirmation
page, logged: "reseed this show" (Redis, RESEED_REDIS) and "recompute Cuebot's tables" (REPAIR_TABLES).
"""

import logging

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from accounting.live.leases import LockBusy
from accounting.operators.drift_views import recorded_drift, redis_shown, table_repair, table_shown
from accounting.operators.overview import farm_overview
from accounting.operators.subscription_bars import subscription_bars
from accounting.reconcile.drift_check import check_status
from accounting.reconcile.recompute import TABLE_REPAIR, repair_pg_accounting
from accounting.reconcile.redis_against_pg import CLOSED, IN_FLIGHT, REDIS_FIELDS, DriftReport, drift_report
from accounting.reconcile.reseed import REDIS_RESEED, ReseedReport, redis_is_empty, reseed
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES, cuebot_owned_show_ids, cuebot_table_drift
from infra import permissions
from infra.era import era
from infra.writes import refused_page, writes
from shows.models import Show

logger = logging.getLogger(__name__)


# Shows on a page of the overview: a studio's 200 would make one page a few screens long, and
# most of its drawing time; the worst come first (farm_overview), the rest a page away.
SHOWS_PER_PAGE = 25


def overview(request: HttpRequest) -> HttpResponse:
    """The admin's index: the farm at a glance above the usual list of tables."""
    found = farm_overview()
    context = {
        **admin.site.each_context(request),
        "title": "Farm overview",
        "app_list": admin.site.get_app_list(request),
        "overview": found,
        "shows_page": Paginator(found.shows, SHOWS_PER_PAGE).get_page(request.GET.get("page")),
        "needing_attention": sum(show.needs_attention for show in found.shows),
    }
    return render(request, "admin/accounting/overview.html", context)


# Drifted rows on a page of the drift index: drift across a studio's farm can name hundreds of
# rows, most of the page's drawing time; the oldest come first, the rest a page away.
DRIFTED_PER_PAGE = 100


def drift_index(request: HttpRequest) -> HttpResponse:
    status, tables = check_status(REDIS_FIELDS), check_status(CUEBOT_TABLES)
    redis_era, owned = era().keeps_redis, cuebot_owned_show_ids()
    shows = [
        {
            "show": show,
            "drift": status.shows.get(show.pk) if redis_era else None,
            "cuebots": owned is None or show.pk in owned,
            "tables": tables.drifted(show.pk),
        }
        for show in Show.objects.order_by("str_name")
    ]
    return render(
        request,
        "admin/accounting/drift_index.html",
        {
            **admin.site.each_context(request),
            "title": "Accounting drift",
            "shows": shows,
            "status": status,
            "tables": tables,
            "redis_era": redis_era,
            "drifted": Paginator(recorded_drift(), DRIFTED_PER_PAGE).get_page(request.GET.get("page")),
        },
    )


def drift_show(request: HttpRequest, show_id: str) -> HttpResponse:
    show = get_object_or_404(Show, pk=show_id)
    # Redis holds nothing for a Cuebot-managed show (every limit would read as missing), and
    # nothing the scheduler reads outside the redis era.
    redis_compared = era().drift_source(flagged=show.b_scheduler_managed) == REDIS_FIELDS.source
    now = timezone.now()
    report = drift_report(show_ids=[show.id]) if redis_compared else DriftReport(shows=[], fields_checked=0, rows=[])
    tables = cuebot_table_drift(show_ids=[show.id])
    context = {
        **admin.site.each_context(request),
        "title": f"Accounting drift: {show.str_name}",
        "show": show,
        "report": report,
        "bars": subscription_bars(show=show) if redis_compared else [],
        "rows": redis_shown(report.rows, now=now),
        "rounding": redis_shown(report.rounding_only),
        "in_flight": redis_shown(report.explained_by(IN_FLIGHT)),
        "closed": report.explained_by(CLOSED),
        "can_reseed": REDIS_RESEED.allowed and request.user.has_perm(permissions.RESEED_REDIS),
        "can_repair": TABLE_REPAIR.allowed and request.user.has_perm(permissions.REPAIR_TABLES),
        "redis_compared": redis_compared,
        "tables_owned": bool(cuebot_owned_show_ids(show_ids=[show.id])),
        "tables": tables,
        "table_rows": table_shown(tables, now=now),
        "repair": table_repair(show=show.str_name),
    }
    return render(request, "admin/accounting/drift_show.html", context)


@writes(REDIS_RESEED, refused=refused_page)
@require_http_methods(["GET", "POST"])
def reseed_show(request: HttpRequest, show_id: str) -> HttpResponse:
    """GET: what a reseed does, and a button; POST: reseed the show's keys (booked, then limits)."""
    if not request.user.has_perm(permissions.RESEED_REDIS):
        raise PermissionDenied("reseeding Redis needs the permission accounting.reseed_redis")
    show = get_object_or_404(Show, pk=show_id)
    drift_page = reverse("acct-drift-show", args=[show.pk])
    if (refusal := _no_reseed(show, post=request.method == "POST")) is not None:
        messages.error(request, refusal)
        return HttpResponseRedirect(drift_page)
    if request.method == "GET":
        return render(
            request,
            "admin/accounting/reseed_confirm.html",
            {**admin.site.each_context(request), "title": f"Reseed {show.str_name}?", "show": show},
        )
    try:
        report = reseed(limits=True, booked=True, show_ids=[show.pk])
    except LockBusy:
        messages.error(request, "Another reseed holds the lock; nothing was written. Try again in a minute.")
        return HttpResponseRedirect(drift_page)
    level, outcome = _reseeded(report)
    return _repaired(
        request,
        show=show,
        level=level,
        outcome=outcome,
        logged=f"admin reseed of show {show.str_name}",
        history="Reseeded Redis",
        told=f"Reseeded {show.str_name}: {outcome}.",
    )


def _no_reseed(show: Show, *, post: bool) -> str | None:
    """Why this show's Redis is not reseeded from its page (None: it is): its counters are not in
    Redis in this era, or (for the POST) Redis is empty and needs the whole farm's rebuild."""
    if not show.b_scheduler_managed:
        return f"{show.str_name} is Cuebot-managed: Redis holds nothing for it; {table_repair(show=show.str_name)} repairs its tables."
    if (refused := era().no_redis_reseed(repair=table_repair(show=show.str_name))) is not None:
        return refused
    if post and redis_is_empty():
        return (
            "The accounting Redis is empty (restarted): it needs the whole-farm bootstrap "
            "(`manage.py acct_reseed`, or the empty-Redis watch), not a one-show reseed."
        )
    return None


def _reseeded(report: ReseedReport) -> tuple[int, str]:
    """A one-show reseed's outcome, and the message level it deserves."""
    # booked=True: every path of reseed reports the booked cycle's outcome (never None here)
    assert report.booked is not None
    if report.bootstrapped:
        return messages.WARNING, "Redis was empty: the whole farm was rebuilt (bootstrap)"
    if not report.booked.written:
        return messages.ERROR, (
            f"booked counters NOT written (refused on each of {report.booked.attempts} attempts: Redis "
            f"restarted or failed over meanwhile); limits: {report.limit_fields} fields"
        )
    return messages.SUCCESS, f"booked: {report.booked.keys} keys, limits: {report.limit_fields} fields written"


@writes(TABLE_REPAIR, refused=refused_page)
@require_http_methods(["GET", "POST"])
def repair_tables(request: HttpRequest, show_id: str) -> HttpResponse:
    """GET: what the recompute does, and a button; POST: Cuebot's five tables of the show from
    SUM(proc), as `manage.py acct_reseed --show NAME` does for a show whose tables Cuebot writes."""
    if not request.user.has_perm(permissions.REPAIR_TABLES):
        raise PermissionDenied("recomputing Cuebot's tables needs the permission accounting.repair_tables")
    show = get_object_or_404(Show, pk=show_id)
    drift_page = reverse("acct-drift-show", args=[show.pk])
    if not cuebot_owned_show_ids(show_ids=[show.pk]):
        messages.error(
            request,
            f"{show.str_name} is scheduler-managed: its tables are its scheduler's record, not Cuebot's, in this era.",
        )
        return HttpResponseRedirect(drift_page)
    if request.method == "GET":
        return render(
            request,
            "admin/accounting/repair_confirm.html",
            {**admin.site.each_context(request), "title": f"Recompute {show.str_name}'s tables?", "show": show},
        )
    repair = repair_pg_accounting(show_ids=[show.pk])
    outcome = f"{len(repair.drifted)} row(s) had drifted, {len(repair.failures)} could not be set"
    return _repaired(
        request,
        show=show,
        level=messages.ERROR if repair.failures else messages.SUCCESS,
        outcome=outcome,
        logged=f"admin recompute of show {show.str_name}'s tables",
        history="Recomputed Cuebot's tables from SUM(proc)",
        told=f"Recomputed {show.str_name}'s tables: {outcome}.",
    )


def _repaired(
    request: HttpRequest, *, show: Show, level: int, outcome: str, logged: str, history: str, told: str
) -> HttpResponse:
    """A repair done from a drift page, with its outcome: in the service log at WARNING, in the
    show's admin history with the user, to the user as a message; then back to the page."""
    logger.warning("%s by %s: %s", logged, request.user.get_username(), outcome)
    # The view checked a permission: an authenticated user, whose pk is set (an anonymous one's is None)
    assert request.user.pk is not None
    LogEntry.objects.log_actions(
        user_id=request.user.pk,
        queryset=[show],
        action_flag=CHANGE,
        change_message=f"{history}: {outcome}",
        single_object=True,
    )
    messages.add_message(request, level, told)
    return HttpResponseRedirect(reverse("acct-drift-show", args=[show.pk]))
