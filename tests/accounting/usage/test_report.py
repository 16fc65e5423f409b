"""The usage report against an independent computation from Cuebot's rows, as the observer."""

import random
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection

from accounting.models import Subscription
from accounting.usage.report import (
    HistoryNotGranted,
    UsageQueryError,
    hours,
    parse_query,
    report_csv,
    report_json,
    usage_report,
)
from accounting.usage.terms import record_terms
from shows.attach import schema_problems
from shows.models import Dept
from tests.accounting.usage.history_rows import Run, add_job_history, add_runs, all_runs
from tests.farms import build_farm
from tests.service_role import as_cuebot, as_observer, role_for

SINCE = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())
UNTIL = int(datetime(2026, 11, 8, tzinfo=UTC).timestamp())
NOW = datetime(2026, 11, 8, 12, tzinfo=UTC)


@pytest.fixture
def observer(settings):
    settings.ACCOUNTING_WRITES = False
    with as_observer():
        yield


def expected_by(*, runs: list[tuple], names: dict[str, str], now: int) -> dict[tuple, list[int]]:
    """(show, alloc, dept, user) names -> [succeeded, failed, running] centicore-seconds, clipped here."""
    totals: dict[tuple, list[int]] = {}
    for show, alloc, _, dept, user, _, cores, _, started, stopped, exit_status in runs:
        end = now if stopped == 0 else stopped
        seconds = min(end, UNTIL) - max(started, SINCE)
        if seconds <= 0:
            continue
        column = 2 if stopped == 0 else (0 if exit_status == 0 else 1)
        totals.setdefault((names[show], names[alloc], names[dept], user), [0, 0, 0])[column] += cores * seconds
    return totals


@pytest.fixture
def history_farm(db):
    """Two shows on two allocations, two departments, runs crossing the period's edges, retries,
    failures and frames still running."""
    first, second = build_farm(managed=False), build_farm(managed=False)
    with as_cuebot():
        other_dept = Dept.objects.create(str_name="comp")
    rng = random.Random(53)
    for farm in (first, second):
        for user, dept in (("ana", farm.dept.id), ("bo", other_dept.id)):
            job = add_job_history(farm, user=user, dept_id=dept, started=SINCE - 86400)
            runs = []
            for _ in range(12):
                started = rng.randint(SINCE - 7200, UNTIL + 3600)
                stopped = rng.choice([0, started + rng.randint(0, 20000)])
                alloc = rng.choice([first.alloc.id, second.alloc.id])
                runs.append(Run(job, alloc, rng.choice([100, 250, 800]), started, stopped, rng.choice([0, 0, 1, 9])))
            add_runs(*runs)
    names = {
        **{f.show.id: f.show.str_name for f in (first, second)},
        **{f.alloc.id: f.alloc.str_name for f in (first, second)},
        **{f.dept.id: f.dept.str_name for f in (first, second)},
        other_dept.id: "comp",
    }
    return first, second, names


def test_figures_equal_an_independent_computation_from_the_rows(history_farm, observer):
    _, _, names = history_farm
    query = parse_query(since="2026-11-01", until="2026-11-08", by="show,allocation,department,user")

    report = usage_report(query=query, now=NOW)

    expected = expected_by(runs=all_runs(), names=names, now=int(NOW.timestamp()))
    got = {
        (row["show"], row["allocation"], row["department"], row["user"]): [
            row["core_hours_succeeded"],
            row["core_hours_failed"],
            row["core_hours_running"],
        ]
        for row in report.rows
    }
    assert got == {key: [hours(value) for value in values] for key, values in expected.items()}
    assert all(sum(values) for values in expected.values()) and any(v[2] for v in expected.values())
    assert report.running_to == NOW


def test_a_run_is_clipped_at_the_period_and_bucket_edges(db, observer):
    farm = build_farm(managed=False)
    job = add_job_history(farm, started=SINCE - 3600)
    # 1 h before the period to 1 h into its second day, 2.5 cores; a retry that failed; one still running.
    add_runs(
        Run(job, farm.alloc.id, 250, SINCE - 3600, SINCE + 86400 + 3600, exit_status=0),
        Run(job, farm.alloc.id, 100, SINCE + 600, SINCE + 1200, exit_status=1),
        Run(job, farm.alloc.id, 100, UNTIL - 1800, 0),
    )
    query = parse_query(since="2026-11-01", until="2026-11-08", by="show", per="day")

    report = usage_report(query=query, now=datetime.fromtimestamp(UNTIL + 7200, tz=UTC))

    days = {row["period"][:10]: row for row in report.rows}
    assert days["2026-11-01"]["core_hours_succeeded"] == Decimal("60.000000")  # 24 h x 2.5 cores
    assert days["2026-11-01"]["core_hours_failed"] == hours(100 * 600)
    assert days["2026-11-02"]["core_hours_succeeded"] == Decimal("2.500000")
    assert days["2026-11-07"]["core_hours_running"] == Decimal("0.500000")  # to the period's end, not to now
    assert set(days) == {"2026-11-01", "2026-11-02", "2026-11-07"}
    assert report.columns == (
        "show",
        "period",
        "core_hours",
        "core_hours_succeeded",
        "core_hours_failed",
        "core_hours_running",
        "gpu_hours",
        "promised_core_hours",
        "core_hours_above_size",
    )


def test_a_day_of_23_hours_counts_23(db, observer, settings):
    settings.TIME_ZONE = "Europe/London"
    farm = build_farm(managed=False)
    job = add_job_history(farm, started=0)
    spring = int(datetime(2026, 3, 28, 12, tzinfo=UTC).timestamp())
    add_runs(Run(job, farm.alloc.id, 100, spring, spring + 3 * 86400, exit_status=0, gpus=2))
    query = parse_query(since="2026-03-29", until="2026-03-31", by="allocation", per="day")

    rows = usage_report(query=query, now=NOW).rows

    assert [(row["period"], row["core_hours"], row["gpu_hours"]) for row in rows] == [
        ("2026-03-29T00:00:00+00:00", Decimal("23.000000"), Decimal("46.000000")),
        ("2026-03-30T00:00:00+01:00", Decimal("24.000000"), Decimal("48.000000")),
    ]


def _at(moment: int) -> datetime:
    return datetime.fromtimestamp(moment, tz=UTC)


def test_promised_and_above_size_follow_a_size_changed_mid_period(db, observer):
    farm = build_farm(managed=False, size=1000)  # 10 cores
    job = add_job_history(farm, started=SINCE)
    record_terms(now=_at(SINCE))
    with as_cuebot(), connection.cursor() as cursor:  # as cueadmin changes it: one UPDATE
        cursor.execute("UPDATE subscription SET int_size = 400 WHERE pk_subscription = %s", [farm.subscription.id])
    record_terms(now=_at(SINCE + 86400))
    # 12 cores for the whole first two days: 2 above 10 on the first day, 8 above 4 on the second.
    add_runs(Run(job, farm.alloc.id, 1200, SINCE, SINCE + 2 * 86400, exit_status=0))
    query = parse_query(since="2026-11-01", until="2026-11-03", by="show,allocation", per="day")

    rows = usage_report(query=query, now=NOW).rows

    assert [(r["promised_core_hours"], r["core_hours_above_size"]) for r in rows] == [
        (Decimal("240.000000"), Decimal("48.000000")),
        (Decimal("96.000000"), Decimal("192.000000")),
    ]
    assert Subscription.objects.get(id=farm.subscription.id).int_size == 400


def test_before_the_service_first_saw_a_subscription_its_promise_is_unknown(db, observer):
    farm = build_farm(managed=False, size=1000)
    job = add_job_history(farm, started=SINCE)
    add_runs(Run(job, farm.alloc.id, 100, SINCE, SINCE + 3600, exit_status=0))
    record_terms(now=_at(SINCE + 86400))
    query = parse_query(since="2026-11-01", until="2026-11-03", by="show,allocation")

    report = usage_report(query=query, now=NOW)

    assert report.rows[0]["promised_core_hours"] is None and report.rows[0]["core_hours_above_size"] is None
    [unknown] = report.unknown_promises
    assert (unknown.show, unknown.since, unknown.until) == (farm.show.str_name, query.since, _at(SINCE + 86400))
    assert report_csv(report).splitlines()[1].endswith(",,")
    assert report_json(report)["promise_unknown"][0]["until"] == "2026-11-02T00:00:00+00:00"


@pytest.mark.parametrize(
    ("arguments", "line"),
    [
        ({"since": "2026-11-08", "until": "2026-11-01"}, "the period ends (2026-11-01) before or when it starts"),
        ({"since": "2026-11-01", "until": "2026-11-01"}, "the period ends (2026-11-01) before or when it starts"),
        (
            {"since": "2026-11-01", "until": "2026-11-08", "by": "show,artist"},
            "unknown grouping 'artist': group by any of show, allocation",
        ),
        ({"since": "2026-11-01", "until": "2026-11-08", "per": "year"}, "unknown period 'year'"),
        ({"since": "2026-13-01", "until": "2026-11-08"}, "since '2026-13-01' is not an ISO 8601 date"),
        ({"since": "2026-11-01T06:00:00", "until": "2026-11-08"}, "has no offset"),
    ],
)
def test_bad_input_is_refused_in_one_line(arguments, line):
    with pytest.raises(UsageQueryError) as refused:
        parse_query(**arguments)
    assert line in str(refused.value) and "\n" not in str(refused.value)


def test_a_date_is_midnight_in_the_sites_time_zone(settings):
    settings.TIME_ZONE = "America/Los_Angeles"
    query = parse_query(since="2026-11-01", until="2026-11-02T00:00:00+00:00")
    assert query.since.isoformat() == "2026-11-01T00:00:00-07:00" and query.by == ("show",)


def test_a_role_not_granted_the_history_is_told_the_grant(db, observer):
    observer_role = role_for(connection.settings_dict["NAME"], kind="observer")
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(f"REVOKE SELECT ON frame_history FROM {observer_role}")
    query = parse_query(since="2026-11-01", until="2026-11-08")
    with pytest.raises(HistoryNotGranted) as refused:
        usage_report(query=query, now=NOW)
    assert str(refused.value) == (
        "the database role may not read Cuebot's history (frame_history): "
        "GRANT SELECT ON config, frame_history, job_history TO the service's role (see docs/attaching.md)"
    )
    # and the rest of the service starts: the start-up checks leave the history to the report
    assert [p.message for p in schema_problems() if "history" in p.message] == []
