"""The NOTIFY era's faults, fired by the main thread when due: the listener's connection
dropped (it reconnects; what was sent meanwhile is lost), every connection of the database
terminated as a PostgreSQL restart would, and jobs killed (FINISHED first, procs later)."""

import time

from django.db import connection, transaction

from accounting.notify.payloads import RELEASE
from simulator.farm import finish_a_job
from simulator.workers.notify.play import NotifyPlay
from simulator.workers.notify.scheduler import KILL_MARKER

NOTIFY_FAULTS = ("listener-drop", "pg-restart", "release-rollback", "job-kill")
FAULT_PERIOD_SECONDS = {"listener-drop": 4.0, "pg-restart": 6.0, "job-kill": 2.0}


def parse_notify_faults(text: str) -> tuple[str, ...]:
    if text == "all":
        return NOTIFY_FAULTS
    if text == "none":
        return ()
    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in NOTIFY_FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) for --era notify: {', '.join(unknown)}; one of {', '.join(NOTIFY_FAULTS)}")
    return kinds


def kill_a_job(run: NotifyPlay) -> None:
    """OpenCue's kill: the job FINISHED (its name freed), its procs released 0.5-2.5 s later,
    one call each. Made with the workers held, so a release that starts after it reads the
    job FINISHED and one before it has committed; the marker rides on the kill's transaction."""
    with run.gate.quiet(), transaction.atomic(), connection.cursor() as cursor:
        job_id = finish_a_job(cursor=cursor, show_ids=run.farm.show_ids, rng=run.rng, managed_only=True)
        if job_id is None:
            return
        cursor.execute("SELECT pg_notify(%s, %s)", [RELEASE, KILL_MARKER + job_id])
        run.killed_jobs.add(job_id)
    run.kill_releases.append((time.monotonic() + run.rng.uniform(0.5, 2.5), job_id))
    run.stats.count("faults", "job-kill")


def inject(run: NotifyPlay, kind: str) -> None:
    if kind == "job-kill":
        kill_a_job(run)
        return
    if kind == "listener-drop":
        run.scheduler.disconnect()
    elif kind == "pg-restart":
        run.scheduler.lost_connection = True
        with connection.cursor() as cursor:  # every other session of this database, as a restart ends them
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
    run.stats.count("faults", kind)
