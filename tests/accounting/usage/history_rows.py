"""Cuebot's history for tests: job_history rows as Cuebot's job triggers write them, runs as
frame_history_open writes them (inserted directly, at the times a test chooses, or by the
trigger itself when a test moves a frame in and out of RUNNING). Cuebot writes them, so they
are written as the superuser (as_cuebot)."""

from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection

from accounting.usage.terms import record_terms
from shows.models import new_pk
from tests.farms import Farm, build_farm
from tests.service_role import as_cuebot


@dataclass(frozen=True)
class Run:
    job_id: str
    alloc_id: str | None
    cores: int
    started: int
    stopped: int = 0
    exit_status: int = -1
    gpus: int = 0


@as_cuebot()
def add_job_history(
    farm: Farm,
    *,
    job_id: str | None = None,
    user: str = "ana",
    shot: str = "sh010",
    dept_id: str | None = None,
    started: int = 0,
    stopped: int = 0,
    core_seconds: tuple[int, int] = (0, 0),
) -> str:
    """A job_history row of the farm's show (a job of its own id unless `job_id`)."""
    job_id = job_id or new_pk()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO job_history (pk_job, pk_show, pk_facility, pk_dept, str_name, str_shot, str_user, "
            "int_ts_started, int_ts_stopped, int_core_time_success, int_core_time_fail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            [
                job_id,
                farm.show.id,
                farm.alloc.facility_id,
                dept_id or farm.dept.id,
                f"job-{job_id[:8]}",
                shot,
                user,
                started,
                stopped,
                *core_seconds,
            ],
        )
    return job_id


@as_cuebot()
def add_runs(*runs: Run) -> None:
    with connection.cursor() as cursor:
        for run in runs:
            cursor.execute(
                "INSERT INTO frame_history (pk_frame, pk_layer, pk_job, str_name, str_state, int_cores, int_gpus, "
                "pk_alloc, int_ts_started, int_ts_stopped, int_exit_status) "
                "VALUES (%s, %s, %s, 'frame', 'RUNNING', %s, %s, %s, %s, %s, %s)",
                [
                    new_pk(),
                    new_pk(),
                    run.job_id,
                    run.cores,
                    run.gpus,
                    run.alloc_id,
                    run.started,
                    run.stopped,
                    run.exit_status,
                ],
            )


@as_cuebot()
def all_runs() -> list[tuple]:
    """Every run with its job's keys: (show, alloc, facility, dept, user, shot, cores, gpus, started, stopped, exit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT jh.pk_show, fh.pk_alloc, jh.pk_facility, jh.pk_dept, jh.str_user, jh.str_shot, fh.int_cores, "
            "fh.int_gpus, fh.int_ts_started, fh.int_ts_stopped, fh.int_exit_status "
            "FROM frame_history fh JOIN job_history jh USING (pk_job)"
        )
        return cursor.fetchall()


def two_shows_with_runs(*spans: tuple[int, int, int]) -> tuple[Farm, Farm]:
    """Two shows promised 4 and 10 cores, their sizes seen by the service since October 1st, each
    with one job whose runs are `spans` (started, stopped, exit status), at 8 and 2.5 cores."""
    farms = build_farm(managed=False, size=400), build_farm(managed=False, size=1000)
    record_terms(now=datetime(2026, 10, 1, tzinfo=UTC))
    for farm, cores in zip(farms, (800, 250), strict=True):
        job = add_job_history(farm, started=min(started for started, _, _ in spans))
        add_runs(*(Run(job, farm.alloc.id, cores, started, stopped, status) for started, stopped, status in spans))
    return farms
