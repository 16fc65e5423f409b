"""GET /api/v1/usage: what each show used and was promised over a period, from Cuebot's history.

The same rows as `manage.py acct_usage` (accounting.usage.report builds them for both), as JSON
or as its CSV, under the read token. Bad input answers one JSON error (400); history tables the
service's role may not read yet, one JSON error naming the GRANT (403)."""

from django.http import HttpResponse
from ninja import Router

from accounting.operators.auth import BearerToken
from accounting.operators.usage_faces import FORMATS, Refusal, usage_or_refusal
from accounting.usage.report import report_csv, report_json
from infra.api import answered
from infra.api_types import AUTH_ERRORS, ErrorOut
from infra.permissions import VIEW_ACCOUNTING

router = Router(tags=["usage"])


@router.get(
    "/usage",
    auth=BearerToken(VIEW_ACCOUNTING),
    response={200: dict, 400: ErrorOut, **AUTH_ERRORS},
    summary="Core-hours and GPU-hours used, and promised, per show, allocation, department... over a period",
    description=f"Needs the permission {VIEW_ACCOUNTING}. The rows of `manage.py acct_usage` for "
    "`[since, until)`: `since` and `until` an ISO 8601 date (midnight in the site's TIME_ZONE) or a "
    "date-time with its offset; `by` a comma list of show, allocation, facility, department, user, shot "
    "(default show); `per` day, week or month (optional); `format` json (default) or csv (the command's "
    "CSV, header row first, as text/csv). Bad input is a 400 with one `detail` line; history tables "
    "the service's role may not read yet are a 403 whose `detail` names the GRANT that fixes it. "
    "docs/usage.md says what each figure means.",
)
def usage(
    request,
    since: str | None = None,
    until: str | None = None,
    by: str = "show",
    per: str | None = None,
    format: str = "json",
):
    if format not in FORMATS:
        return answered(request, {"detail": f"format must be json or csv, not {format!r}"}, status=400)
    found = usage_or_refusal(since=since, until=until, by=by, per=per)
    if isinstance(found, Refusal):
        return answered(request, {"detail": found.detail}, status=found.status)
    if format == "csv":
        return HttpResponse(report_csv(found), content_type="text/csv; charset=utf-8")
    return answered(request, report_json(found))
