"""Rolled-up days give the same figures as the raw runs, to the centicore-second, while runs
open and close around the roll-ups; a roll-up run twice adds nothing; a day can be rebuilt."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from accounting.models import UsageRolledDay, UsageRollup
from accounting.usage.report import UsageQuery, tally
from accounting.usage.rollups import LAG_SECONDS, rebuild, roll_up
from accounting.usage.terms import record_terms
from tests.accounting.usage.history_rows import Run, add_job_history, add_runs
from tests.farms import build_farm
from tests.service_role import as_cuebot

START = datetime(2026, 11, 1, tzinfo=UTC)
T0 = int(START.timestamp())
DAY = 86400


def figures(*, query: UsageQuery, now: datetime, use_rollups: bool) -> tuple[dict, dict]:
    found = tally(query=query, now=now, use_rollups=use_rollups)
    return found.used, found.above


def close_runs(*, at: int, count: int, exit_status: int) -> None:
    """As the trigger closes runs: the oldest open ones, stamped `at`; exit status 299 deletes them."""
    with as_cuebot(), connection.cursor() as cursor:
        if exit_status == 299:
            cursor.execute(
                "DELETE FROM frame_history WHERE pk_frame_history IN (SELECT pk_frame_history FROM frame_history "
                "WHERE int_ts_stopped = 0 ORDER BY int_ts_started, pk_frame_history LIMIT %s)",
                [count],
            )
            return
        cursor.execute(
            "UPDATE frame_history SET int_ts_stopped = %s, int_exit_status = %s WHERE pk_frame_history IN "
            "(SELECT pk_frame_history FROM frame_history WHERE int_ts_stopped = 0 AND int_ts_started <= %s "
            "ORDER BY int_ts_started, pk_frame_history LIMIT %s)",
            [at, exit_status, at, count],
        )


@pytest.fixture
def farms(db):
    first, second = build_farm(managed=False, size=300), build_farm(managed=False, size=500)
    jobs = [add_job_history(farm, user=user, started=T0) for farm in (first, second) for user in ("ana", "bo")]
    record_terms(now=START - timedelta(days=1))
    return first, second, jobs


steps = st.lists(
    st.tuples(
        st.integers(min_value=600, max_value=2 * DAY),  # time passes
        st.lists(
            st.tuples(st.integers(0, 3), st.integers(0, 1), st.sampled_from([100, 250, 400]), st.integers(0, 7200)),
            max_size=4,
        ),  # runs that start: (job, allocation, cores, seconds ago)
        st.integers(0, 3),  # runs that stop now
        st.sampled_from([0, 1, 299]),  # with this exit status (299: Cuebot deletes the run)
        st.booleans(),  # a roll-up after the step
    ),
    min_size=2,
    max_size=6,
)
periods = st.tuples(
    st.integers(0, 6 * DAY),
    st.integers(3600, 6 * DAY),
    st.sampled_from([None, "day", "week"]),
    st.sampled_from([("show", "allocation"), ("user",), ("show", "department", "shot")]),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps, period=periods)
def test_rolled_up_figures_equal_the_raw_ones_while_runs_open_and_close(farms, steps, period):
    first, second, jobs = farms
    allocs = [first.alloc.id, second.alloc.id]
    with transaction.atomic():
        now = T0
        for passed, starts, stops, exit_status, rolls in steps:
            now += passed
            add_runs(*(Run(jobs[j], allocs[a], cores, now - ago) for j, a, cores, ago in starts))
            close_runs(at=now, count=stops, exit_status=exit_status)
            if rolls:
                roll_up(now=datetime.fromtimestamp(now, tz=UTC))
        offset, length, per, by = period
        since = datetime.fromtimestamp(T0 + offset, tz=UTC)
        query = UsageQuery(since=since, until=since + timedelta(seconds=length), by=by, per=per)
        at = datetime.fromtimestamp(now, tz=UTC)
        event(f"rolled days: {min(UsageRolledDay.objects.count(), 3)}")
        assert figures(query=query, now=at, use_rollups=True) == figures(query=query, now=at, use_rollups=False)
        transaction.set_rollback(True)


def test_a_roll_up_run_twice_adds_nothing_and_a_rebuilt_day_is_the_same(farms):
    first, _, jobs = farms
    add_runs(
        Run(jobs[0], first.alloc.id, 250, T0 + 3600, T0 + DAY + 3600, exit_status=0),
        Run(jobs[1], first.alloc.id, 100, T0 + 7200, 0),
    )
    now = START + timedelta(days=2, seconds=LAG_SECONDS)

    assert roll_up(now=now) == 2
    rows = sorted(UsageRollup.objects.values_list("day", "outcome", "centicore_seconds"))
    assert roll_up(now=now) == 0
    assert sorted(UsageRollup.objects.values_list("day", "outcome", "centicore_seconds")) == rows
    assert rows == [
        (START.date(), "succeeded", 250 * (DAY - 3600)),
        (START.date() + timedelta(days=1), "succeeded", 250 * 3600),
    ]

    UsageRollup.objects.filter(day=START.date()).update(centicore_seconds=1)  # damaged
    assert rebuild(day=START.date(), now=now)
    assert sorted(UsageRollup.objects.values_list("day", "outcome", "centicore_seconds")) == rows
    assert list(UsageRolledDay.objects.order_by("day").values_list("day", flat=True)) == [
        START.date(),
        START.date() + timedelta(days=1),
    ]


def test_a_day_that_counted_a_run_cuebot_then_deleted_is_recomputed(farms):
    first, _, jobs = farms  # the first subscription's size is 3 cores
    add_runs(Run(jobs[0], first.alloc.id, 500, T0 + DAY - 3600, 0))  # 5 cores from the day's last hour, open
    rolled_at = START + timedelta(days=1, seconds=LAG_SECONDS)
    query = UsageQuery(since=START, until=START + timedelta(days=1), by=("show", "allocation"), per=None)
    assert roll_up(now=rolled_at) == 1
    assert sum(figures(query=query, now=rolled_at, use_rollups=True)[1].values()) == 200 * 3600

    close_runs(at=T0 + DAY + 3600, count=1, exit_status=299)
    roll_up(now=rolled_at + timedelta(hours=1))

    later = rolled_at + timedelta(hours=1)
    assert figures(query=query, now=later, use_rollups=True) == figures(query=query, now=later, use_rollups=False)
    assert figures(query=query, now=later, use_rollups=True)[1] == {}


def test_a_long_history_is_rolled_a_month_a_transaction_to_the_same_figures(farms):
    first, second, jobs = farms
    add_runs(
        Run(jobs[0], first.alloc.id, 250, T0 + 3600, T0 + 45 * DAY, exit_status=0),  # six weeks long
        Run(jobs[2], second.alloc.id, 100, T0 + 33 * DAY, T0 + 33 * DAY + 60, exit_status=1),
        Run(jobs[1], first.alloc.id, 400, T0 + 38 * DAY, 0),
    )
    now = START + timedelta(days=40, seconds=LAG_SECONDS)

    assert roll_up(now=now) == 40  # 31, then 9

    query = UsageQuery(since=START, until=now, by=("show", "allocation"), per="week")
    assert figures(query=query, now=now, use_rollups=True) == figures(query=query, now=now, use_rollups=False)
