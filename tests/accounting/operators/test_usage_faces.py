"""The usage report's faces: GET /api/v1/usage and the admin's usage page give the rows of
accounting.usage.report (the command's), refuse bad input in one line, and name the GRANT where
the history may not be read."""

import csv
import html
import io
import json
import re
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection

from accounting.operators import usage_faces
from accounting.usage.report import UsageQueryError, parse_query, report_csv, report_json, usage_report
from infra.permissions import RELEASE_PROCS, VIEW_ACCOUNTING
from tests.accounting.usage.history_rows import two_shows_with_runs
from tests.service_role import as_cuebot, role_for

pytestmark = pytest.mark.django_db

SINCE = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())
HOUR = 3600
QUERY = {"since": "2026-11-01", "until": "2026-11-08", "by": "show,allocation"}


@pytest.fixture
def history(db):
    """Two shows' closed runs (a failure, a retry, one crossing the period's start), and their
    subscriptions seen by the service from before the period: every figure fixed, promises known."""
    return two_shows_with_runs(
        (SINCE - HOUR, SINCE + 2 * HOUR, 0),
        (SINCE + 3 * HOUR, SINCE + 4 * HOUR, 1),
        (SINCE + 4 * HOUR, SINCE + 6 * HOUR, 0),
    )


def expected(**asked: str) -> tuple[dict, str]:
    report = usage_report(query=parse_query(**asked))
    return report_json(report), report_csv(report)


def command(*args: str) -> str:
    out = io.StringIO()
    call_command("acct_usage", *args, stdout=out)
    return out.getvalue()


def test_the_api_answers_the_commands_rows_as_json_and_as_csv(history, reader_client):
    rows, as_csv = expected(**QUERY)
    answer = reader_client.get("/api/v1/usage", QUERY)
    assert answer.status_code == 200
    body = answer.json()
    assert body["rows"] == rows["rows"] and body["columns"] == rows["columns"]
    small, big = history
    by_show = {row["show"]: row for row in body["rows"]}
    # 5 hours in the period (the first run clipped at its start), one of them failed: 8 cores, 2.5 cores.
    assert (by_show[small.show.str_name]["core_hours"], by_show[small.show.str_name]["core_hours_failed"]) == (
        "40.000000",
        "8.000000",
    )
    assert (by_show[big.show.str_name]["core_hours"], by_show[big.show.str_name]["core_hours_failed"]) == (
        "12.500000",
        "2.500000",
    )
    assert body["promise_unknown"] == []
    answer = reader_client.get("/api/v1/usage", {**QUERY, "format": "csv"})
    assert answer.status_code == 200 and answer["Content-Type"] == "text/csv; charset=utf-8"
    asked = ("--since", "2026-11-01", "--until", "2026-11-08", "--by", "show,allocation")
    assert answer.content.decode() == as_csv == command(*asked, "--format", "csv")
    assert json.loads(command(*asked, "--format", "json"))["rows"] == body["rows"]


@pytest.mark.parametrize(
    "asked",
    [
        {"since": "2026-13-01"},
        {"until": "2026-10-01"},
        {"by": "show,planet"},
        {"per": "year"},
        {"since": "2026-11-01T06:00"},
    ],
)
def test_bad_input_is_one_json_error_400_with_the_reports_own_line(history, reader_client, asked):
    query = {**QUERY, **asked}
    with pytest.raises(UsageQueryError) as refused:
        parse_query(**query)
    answer = reader_client.get("/api/v1/usage", query)
    assert answer.status_code == 400 and answer.json() == {"detail": str(refused.value)}


@pytest.mark.parametrize(
    ("asked", "line"),
    [
        ({"since": ""}, "since is required: an ISO 8601 date (2026-11-01) or a date-time with its offset"),
        ({"until": None}, "until is required: an ISO 8601 date (2026-11-01) or a date-time with its offset"),
        ({"format": "xml"}, "format must be json or csv, not 'xml'"),
    ],
)
def test_a_missing_date_or_an_unknown_format_is_one_json_error_400(reader_client, asked, line):
    query = {name: value for name, value in {**QUERY, **asked}.items() if value is not None}
    answer = reader_client.get("/api/v1/usage", query)
    assert answer.status_code == 400 and answer.json() == {"detail": line}


def revoke_history() -> None:
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(f"REVOKE SELECT ON job_history FROM {role_for(connection.settings_dict['NAME'])}")


def test_history_the_role_may_not_read_is_one_json_error_naming_the_grant(reader_client):
    revoke_history()
    answer = reader_client.get("/api/v1/usage", QUERY)
    assert answer.status_code == 403
    assert answer.json() == {
        "detail": "the database role may not read Cuebot's history (job_history): "
        "GRANT SELECT ON config, frame_history, job_history TO the service's role (see docs/attaching.md)"
    }
    assert reader_client.get("/api/v1/shows").status_code == 200  # the rest of the API answers on


def test_the_api_needs_the_read_permission(client, token_with):
    assert client.get("/api/v1/usage", QUERY).status_code == 401
    token = token_with(RELEASE_PROCS)
    answer = client.get("/api/v1/usage", QUERY, HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 403 and answer.json()["permission"] == VIEW_ACCOUNTING


# --- The admin page ---------------------------------------------------------------------------


def cells(page: str, selector: str) -> list[list[str]]:
    """The text of each row's cells of the table `selector` (an id), as the page shows them (a
    header's line-break opportunities, <wbr>, are no text)."""
    table = re.search(rf'<table id="{selector}".*?</table>', page, flags=re.S)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(0), flags=re.S)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell).strip())
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, flags=re.S)
        ]
        for row in rows
    ]


def test_the_page_shows_the_rows_a_chart_of_used_against_promised_and_a_csv_of_the_same_rows(history, admin_client):
    _, as_csv = expected(**QUERY)
    page = admin_client.get("/admin/accounting/usage/", {**QUERY, "by": ["show", "allocation"]})
    assert page.status_code == 200
    text = page.content.decode()
    assert cells(text, "usage-table") == list(csv.reader(io.StringIO(as_csv)))
    bars = re.findall(r'<div class="acct-bar" data-name="([^"]+)" data-used="([^"]+)" data-promised="([^"]+)">', text)
    # Shows by what they used, most first; promised: 4 and 10 cores over the period (168 hours).
    small, big = history
    assert bars == [(small.show.str_name, "40.000000", "672.000000"), (big.show.str_name, "12.500000", "1680.000000")]
    widths = re.findall(r'<div class="acct-fill" style="width: ([\d.]+)%">', text)
    marks = re.findall(r'<div class="acct-mark acct-promised" style="left: calc\(([\d.]+)% - 1px\)">', text)
    assert (widths, marks) == (["2.4", "0.7"], ["40.0", "100.0"])  # of the widest figure, 1680
    link = html.unescape(re.search(r'<a class="button" id="usage-csv" href="\?([^"]+)"', text).group(1))
    download = admin_client.get(f"/admin/accounting/usage/?{link}")
    assert download["Content-Type"] == "text/csv; charset=utf-8"
    assert download["Content-Disposition"] == 'attachment; filename="usage-2026-11-01-2026-11-08.csv"'
    assert download.content.decode() == as_csv


def test_the_chart_sums_a_shows_allocations_and_periods_and_drops_an_unknown_promise():
    rows = [
        {"show": "a", "period": "d1", "core_hours": "1.5", "promised_core_hours": "10"},
        {"show": "a", "period": "d2", "core_hours": "2.5", "promised_core_hours": "10"},
        {"show": "b", "period": "d1", "core_hours": "40", "promised_core_hours": None},
        {"show": "b", "period": "d2", "core_hours": "0", "promised_core_hours": "10"},
    ]
    bars = usage_faces.chart_bars(rows=rows, key="show")
    assert [(bar.name, str(bar.used), bar.promised, bar.used_pct, bar.promised_pct) for bar in bars] == [
        ("b", "40", None, 100.0, None),
        ("a", "4.0", 20, 10.0, 50.0),
    ]
    assert usage_faces.chart_key(by=["department", "allocation"]) == "allocation"
    assert usage_faces.chart_key(by=["user"]) is None


def test_opened_without_a_query_the_page_shows_the_last_week_by_show_and_allocation(history, admin_client):
    text = admin_client.get("/admin/accounting/usage/").content.decode()
    assert cells(text, "usage-table")[0][:2] == ["show", "allocation"]
    assert 'name="by" value="show" checked' in text and 'name="by" value="allocation" checked' in text
    assert 'name="by" value="user">' in text


def test_bad_input_answers_one_line_on_the_page(admin_client):
    text = admin_client.get("/admin/accounting/usage/", {**QUERY, "until": "2026-10-01"}).content.decode()
    with pytest.raises(UsageQueryError) as refused:
        parse_query(**{**QUERY, "until": "2026-10-01"})
    assert re.findall(r'<p class="errornote" id="usage-refusal">(.*?)</p>', text) == [html.escape(str(refused.value))]
    assert 'id="usage-table"' not in text and 'id="usage-chart"' not in text
    csv_asked = admin_client.get("/admin/accounting/usage/", {**QUERY, "until": "2026-10-01", "format": "csv"})
    assert csv_asked["Content-Type"].startswith("text/html")  # the refusal's page, not an empty CSV


def test_the_page_names_the_grant_where_the_history_may_not_be_read(admin_client):
    revoke_history()
    text = admin_client.get("/admin/accounting/usage/", QUERY).content.decode()
    assert "GRANT SELECT ON config, frame_history, job_history TO the service&#x27;s role" in text


def test_the_page_is_open_to_staff_only(client, django_user_model):
    client.force_login(django_user_model.objects.create_user(username="artist", password="pw"))
    assert client.get("/admin/accounting/usage/").status_code == 302  # to the login page
