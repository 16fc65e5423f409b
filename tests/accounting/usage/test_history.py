"""Cuebot's history as its trigger writes it, the jobs whose runs disagree with job_history, and
the history's health, as the observer reads them."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection

from accounting.usage.report import history_health, parse_query, reconcile_jobs, usage_report
from tests.accounting.usage.history_rows import Run, add_job_history, add_runs
from tests.farms import build_farm
from tests.service_role import as_cuebot, as_observer

SINCE = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp())


@pytest.fixture
def observer(settings):
    settings.ACCOUNTING_WRITES = False
    with as_observer():
        yield


def cuebot(sql: str, params: list | None = None) -> list[tuple]:
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def move_frame(frame_id: str, *, state: str, exit_status: int = -1, host: str | None = None) -> None:
    """As Cuebot's dispatcher and its frame completion write a frame: one UPDATE of frame."""
    cuebot(
        "UPDATE frame SET str_state = %s, int_exit_status = %s, str_host = COALESCE(%s, str_host), "
        "int_cores = 250, int_gpus = 1 WHERE pk_frame = %s",
        [state, exit_status, host, frame_id],
    )


def runs_of(frame_id: str) -> list[tuple]:
    return cuebot(
        "SELECT pk_alloc, int_cores, int_gpus, int_exit_status, int_ts_stopped > 0, str_state FROM frame_history "
        "WHERE pk_frame = %s ORDER BY int_ts_stopped = 0, int_exit_status",
        [frame_id],
    )


def test_the_trigger_writes_a_run_per_attempt_and_the_report_counts_them(db, observer):
    farm = build_farm(managed=False)
    add_job_history(farm, job_id=farm.job.id, started=SINCE)
    frame = farm.add_frame()
    move_frame(frame.id, state="RUNNING", host=farm.host.str_name)
    move_frame(frame.id, state="DEAD", exit_status=1)  # failed: closed with its status
    move_frame(frame.id, state="RUNNING")  # the retry: a second run
    move_frame(frame.id, state="WAITING", exit_status=299)  # discarded: its open run deleted
    move_frame(frame.id, state="RUNNING")  # the third attempt
    move_frame(frame.id, state="SUCCEEDED", exit_status=0)

    assert runs_of(frame.id) == [
        (farm.alloc.id, 250, 1, 0, True, "RUNNING"),
        (farm.alloc.id, 250, 1, 1, True, "RUNNING"),
    ]
    # One transaction stamps every run alike: give them the hours a farm would have.
    cuebot(
        "UPDATE frame_history SET int_ts_started = %s + 3600 * int_exit_status, "
        "int_ts_stopped = %s + 3600 * int_exit_status + 1800 WHERE pk_frame = %s",
        [SINCE, SINCE, frame.id],
    )
    row = usage_report(query=parse_query(since="2026-11-01", until="2026-11-02"), now=datetime.now(UTC)).rows[0]
    assert (row["core_hours_succeeded"], row["core_hours_failed"], row["gpu_hours"]) == (
        Decimal("1.250000"),
        Decimal("1.250000"),
        Decimal("1.000000"),
    )


def test_disable_history_stops_the_trigger_and_is_said(db, observer):
    farm = build_farm(managed=False)
    add_job_history(farm, job_id=farm.job.id, started=SINCE)
    frame = farm.add_frame()
    cuebot("INSERT INTO config (pk_config, str_key) VALUES ('c1', 'DISABLE_HISTORY')")

    move_frame(frame.id, state="RUNNING", host=farm.host.str_name)

    assert runs_of(frame.id) == []
    assert history_health()[0].startswith("DISABLE_HISTORY is set in Cuebot's config table")


def test_health_names_stale_open_runs_and_procs_with_no_run(db, settings):
    farm = build_farm(managed=False)
    job = add_job_history(farm, job_id=farm.job.id, started=SINCE)
    add_runs(Run(job, farm.alloc.id, 100, SINCE, 0))  # open, its frame never running
    farm.add_proc(cores=100)  # booked on a frame written RUNNING without the trigger
    settings.ACCOUNTING_WRITES = False

    with as_observer():
        problems = history_health()

    assert problems == [
        "1 open run(s) in frame_history belong to frames no longer running: "
        "they are counted as running to now until Cuebot closes them",
        "1 proc(s) booked now run frames with no open run in frame_history: their time is not in the figures",
    ]


def test_reconcile_lists_the_jobs_that_differ_from_job_history_and_why(db, observer):
    farm = build_farm(managed=False)
    stopped = SINCE + 7200
    # 2.5 cores for 101 s: 252.5 core-seconds, 252 as Cuebot floors it; 1 core for 0 s counts 1.
    agreeing = add_job_history(farm, started=SINCE, stopped=stopped, core_seconds=(252, 1))
    add_runs(
        Run(agreeing, farm.alloc.id, 250, SINCE, SINCE + 101, 0), Run(agreeing, farm.alloc.id, 100, SINCE, SINCE, 1)
    )
    deleted = add_job_history(farm, started=SINCE, stopped=stopped, core_seconds=(3600, 600))
    add_runs(Run(deleted, farm.alloc.id, 100, SINCE, SINCE + 3600, 0))
    left_open = add_job_history(farm, started=SINCE, stopped=stopped, core_seconds=(60, 0))
    add_runs(Run(left_open, farm.alloc.id, 100, SINCE, SINCE + 60, 0), Run(left_open, farm.alloc.id, 100, SINCE, 0))
    add_job_history(farm, started=SINCE, stopped=SINCE + 3 * 86400, core_seconds=(1, 0))  # finished after the period

    found = reconcile_jobs(query=parse_query(since="2026-11-01", until="2026-11-02"))

    assert [
        (m.job, m.core_seconds, m.rounded_core_seconds, m.job_history_core_seconds, m.why) for m in found
    ] == sorted(
        [
            (
                f"job-{deleted[:8]}",
                Decimal(3600),
                3600,
                4200,
                "runs missing from frame_history (a run deleted, or never recorded)",
            ),
            (f"job-{left_open[:8]}", Decimal(60), 60, 60, "1 open run(s) of frames no longer running (not counted)"),
        ]
    )
