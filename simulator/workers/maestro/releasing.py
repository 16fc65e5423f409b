"""The releasers of the Maestro era: this service's, in process (one proc or a batch, and the
killed jobs' procs one call each) and over HTTP through the web server as deployed, with the
release-rollback fault; and Cuebot's own, with its statements beside the service."""

import time
from collections.abc import Callable

from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connection, transaction

from accounting.release.unbook import unbook_proc, unbook_procs
from infra.transactions import sqlstate
from simulator.workers.maestro.cuebot_release import cuebot_release
from simulator.workers.maestro.operating import kill_a_job
from simulator.workers.maestro.play import Lost, MaestroPlay, attempt, lost, reconnect

HTTP_SHARE = 0.2  # service releases sent over HTTP when the web server runs
RESTART_SECONDS = 5.0  # how long after a pg-restart a failed HTTP release is put down to it


class RolledBack(Exception):
    pass


PICK_PROCS = """
SELECT pk_proc FROM proc WHERE pk_show = ANY(%(shows)s) AND pk_job <> ALL(%(killed)s::text[])
 ORDER BY random() LIMIT %(n)s
"""


def _pick(*, run: MaestroPlay, n: int) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(PICK_PROCS, {"shows": run.farm.show_ids, "killed": sorted(run.killed_jobs.copy()), "n": n})
        return [row[0] for row in cursor.fetchall()]


def _released(*, run: MaestroPlay, request: int, kind: str, outcomes: list[bool]) -> None:
    run.stats.count("releases", kind, sum(outcomes))
    run.stats.answer(request, outcome="released" if any(outcomes) else "not found")


def release_through_service(*, run: MaestroPlay, proc_ids: list[str], kind: str) -> None:
    """This service's release, in process: one proc (unbook_proc) or a batch (unbook_procs)."""
    request = run.stats.request()

    def once() -> list[bool]:
        if len(proc_ids) == 1:
            return [unbook_proc(proc_id=proc_ids[0]) is not None]
        return [r is not None for r in unbook_procs(proc_ids=proc_ids)]

    try:
        outcomes = attempt(run=run, where=kind, body=once)
    except Lost:
        run.stats.answer(request, outcome="connection lost")
        run.stats.add(release_unknown=len(proc_ids))
        reconnect(run=run, where=kind)
        return
    _released(run=run, request=request, kind=kind, outcomes=outcomes)


def release_over_http(*, run: MaestroPlay, proc_ids: list[str]) -> None:
    """The same release through the web server as deployed; one response per request."""
    assert run.web is not None
    request = run.stats.request()
    kind = "service http batch" if len(proc_ids) > 1 else "service http single"
    try:
        outcomes = run.web.release(proc_ids)
    except (RuntimeError, OSError) as error:
        run.stats.answer(request, outcome="http failed")
        run.stats.add(release_unknown=len(proc_ids))
        if time.monotonic() - run.restarted_at > RESTART_SECONDS:
            # Only a restart (the server's session ended under the request) excuses a failed call.
            run.stats.record("worker_errors", f"HTTP release with no restart near: {error}")
        return
    _released(run=run, request=request, kind=kind, outcomes=outcomes)


def release_rolled_back(*, run: MaestroPlay, proc_ids: list[str]) -> None:
    """release-rollback: the service's batch release inside a savepoint of a caller's transaction
    that then rolls back, savepoint included: nothing may change."""
    request = run.stats.request()
    try:
        with transaction.atomic():
            with transaction.atomic():
                unbook_procs(proc_ids=proc_ids)
            raise RolledBack
    except RolledBack:
        run.stats.answer(request, outcome="rolled back")
        run.stats.count("faults", "release-rollback")
    except (DjangoOperationalError, DjangoInterfaceError) as error:
        if not lost(error=error) and sqlstate(error) != "40P01":
            raise
        run.stats.answer(request, outcome="rolled back")  # by PostgreSQL instead: nothing changed either way
        if lost(error=error):
            reconnect(run=run, where="release-rollback")
        else:
            run.stats.count("deadlocks", "release-rollback")  # rolled back as it was meant to be: no rerun


def service_releaser_loop(*, run: MaestroPlay, index: int) -> None:
    rng = run.rng("service releaser", index)
    while not run.stop.is_set():
        try:
            _release_killed_jobs_due(run=run)
            proc_ids = _pick(run=run, n=rng.randint(2, 8) if rng.random() < 0.2 else 1)
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not lost(error=error):
                raise
            reconnect(run=run, where="service releaser")
            continue
        if not proc_ids:
            run.stop.wait(0.02)
            continue
        if run.faults.take("release-rollback"):
            release_rolled_back(run=run, proc_ids=proc_ids)
        elif run.web is not None and rng.random() < HTTP_SHARE:
            release_over_http(run=run, proc_ids=proc_ids)
        else:
            release_through_service(
                run=run, proc_ids=proc_ids, kind="service batch" if len(proc_ids) > 1 else "service single"
            )


def _release_killed_jobs_due(*, run: MaestroPlay) -> None:
    """Cuebot releases a killed job's procs as their hosts report back, later, one call each,
    through this service; the releases credit all five tables like any other."""
    with run.lock:
        due = [kill for kill in run.kills_due if kill[0] <= time.monotonic()]
        for kill in due:
            run.kills_due.remove(kill)
    for _, job_id in due:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pk_proc FROM proc WHERE pk_job = %s ORDER BY pk_proc", [job_id])
            proc_ids = [row[0] for row in cursor.fetchall()]
        for proc_id in proc_ids:
            release_through_service(run=run, proc_ids=[proc_id], kind="job-kill")


def cuebot_releaser_loop(*, run: MaestroPlay, index: int) -> None:
    rng = run.rng("cuebot releaser", index)
    while not run.stop.is_set():
        try:
            if run.faults.take("job-kill") and not kill_a_job(run=run, rng=rng):
                run.faults.rearm("job-kill")
            proc_ids = _pick(run=run, n=rng.randint(2, 6) if rng.random() < 0.3 else 1)
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not lost(error=error):
                raise
            reconnect(run=run, where="cuebot releaser")
            continue
        if not proc_ids:
            run.stop.wait(0.02)
            continue
        release_with_cuebots_statements(run=run, proc_ids=proc_ids)
        run.stop.wait(0.005)


def release_with_cuebots_statements(
    *, run: MaestroPlay, proc_ids: list[str], after_table: Callable[..., None] = lambda **_: None
) -> None:
    request = run.stats.request()

    def once() -> list[str]:
        with transaction.atomic(), connection.cursor() as cursor:
            return cuebot_release(cursor=cursor, proc_ids=proc_ids, after_table=after_table)

    try:
        released = attempt(run=run, where="cuebot release", body=once)
    except Lost:
        run.stats.answer(request, outcome="connection lost")
        run.stats.add(release_unknown=len(proc_ids))
        reconnect(run=run, where="cuebot release")
        return
    _released(run=run, request=request, kind="cuebot", outcomes=[proc_id in released for proc_id in proc_ids])
