"""The threads of a `simulate_farm --era maestro` run: Maestro's bookers, this service's
releasers and Cuebot's, the operator, and the faults that stop the world.

Why it exists: each plays one writer of the five accounting tables as it writes on a site, in
its own thread and PostgreSQL session, so that their transactions meet on the same rows as they
would there. Cuebot's statements themselves are simulator.maestro_cuebot's; this module decides
who runs them when, as which role, and counts what came of it.
"""

import itertools
import random
import threading
import time
from collections.abc import Callable

from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connection, transaction

from accounting.limits.changes import set_folder_limits, set_job_limits, set_subscription_limits
from accounting.models import FolderResource, JobResource, Subscription
from accounting.ownership.toggle import set_scheduler_managed
from accounting.reconcile.recompute import recompute_pg_accounting
from accounting.release.unbook import unbook_proc, unbook_procs
from infra.transactions import sqlstate
from shows.models import Show
from simulator import pg_truth
from simulator.farm import PROC_MEM_KB, LayerRef, finish_a_job
from simulator.farm_builder import PROC_CORES
from simulator.maestro_cuebot import Planned, book_chunk, cuebot_release
from simulator.maestro_run import SERVICE_THREAD, Lost, MaestroRun, attempt, lost, reconnect, worker
from simulator.stopping import Threads

TICK_HOSTS = 6  # hosts a tick plans on
CHUNK_HOSTS = 2  # hosts per chunk (its own transaction)
LOCAL_SHARE = 0.15  # bookings on a host with a local reservation that go to the reservation
HTTP_SHARE = 0.2  # service releases sent over HTTP when the web server runs
LOCK_WAIT_SECONDS = 5.0
RESTART_SECONDS = 5.0  # how long after a pg-restart a failed HTTP release is put down to it

# --- Bookers: Maestro's tick -------------------------------------------------------------------

TICK_HOSTS_SQL = """
SELECT pk_host, pk_alloc, int_cores_idle, int_gpus_idle FROM host
 WHERE pk_host = ANY(%(hosts)s) AND int_cores_idle >= %(cores)s AND int_mem_idle >= %(mem)s ORDER BY pk_host
"""


def booker_loop(*, run: MaestroRun, index: int) -> None:
    rng, layers = run.rng("booker", index), run.layers()
    while not run.stop.is_set():
        try:
            tick(run=run, rng=rng, layers=layers)
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not lost(error=error):
                raise
            reconnect(run=run, where="booker")
        run.stop.wait(0.005)


def tick(*, run: MaestroRun, rng: random.Random, layers: list[LayerRef]) -> None:
    """One tick: PostgreSQL read afresh (open hosts, who plans which show), procs planned on a
    few hosts, then booked in host-aligned chunks, each its own transaction."""
    with connection.cursor() as cursor:
        cursor.execute(TICK_HOSTS_SQL, {"hosts": run.farm.host_ids, "cores": min(PROC_CORES), "mem": PROC_MEM_KB})
        hosts = cursor.fetchall()
        cursor.execute("SELECT pk_show FROM show WHERE pk_show = ANY(%s) AND b_scheduler_managed", [run.farm.show_ids])
        flagged = {row[0] for row in cursor.fetchall()}
    if not hosts:
        run.stats.count("rejections", "host")
        run.stop.wait(0.02)  # a full farm: the next tick, not a spin
        return
    chosen = sorted(rng.sample(hosts, min(TICK_HOSTS, len(hosts))))
    chunks = []
    for start in range(0, len(chosen), CHUNK_HOSTS):
        plans = [
            plan
            for host in chosen[start : start + CHUNK_HOSTS]
            for _ in range(rng.randint(1, 3))
            if (plan := _plan(run=run, rng=rng, host=host, layers=layers, flagged=flagged)) is not None
        ]
        if plans:
            chunks.append(plans)
    for i, plans in enumerate(chunks):
        if i and run.faults.take("flag-flip"):
            flip_a_flag(run=run, rng=rng)  # mid-tick: the rest of this tick was planned on the old flag
            run.stats.count("faults", "flag-flip")
        book(run=run, plans=plans, rollback=run.faults.take("booking-rollback"))


def _plan(
    *, run: MaestroRun, rng: random.Random, host: tuple, layers: list[LayerRef], flagged: set[str]
) -> Planned | None:
    host_id, alloc_id, _, gpus_idle = host
    cores = rng.choice(PROC_CORES)
    gpus = rng.choice((1, 1, 2)) if gpus_idle > 0 and rng.random() < 0.4 else 0
    reserved = [job for job in run.reservations.get(host_id, ()) if job not in run.killed_jobs]
    if reserved and rng.random() < LOCAL_SHARE:
        layer = rng.choice(run.layers_by_job[rng.choice(reserved)])
        return Planned(
            host_id=host_id, alloc_id=alloc_id, layer=layer, cores=cores, gpus=gpus, local=True, planner="local"
        )
    layer = rng.choice(layers)
    if layer.job_id in run.killed_jobs:
        return None
    planner = "maestro" if layer.show_id in flagged else "dispatcher"
    return Planned(
        host_id=host_id, alloc_id=alloc_id, layer=layer, cores=cores, gpus=gpus, local=False, planner=planner
    )


class _RolledBack(Exception):
    pass


FRAMES_THERE = "SELECT pk_frame FROM frame WHERE pk_frame = ANY(%(ids)s)"


def book(*, run: MaestroRun, plans: list[Planned], rollback: bool) -> None:
    """One chunk. With `rollback` (the booking-rollback fault) its writes are made inside a
    savepoint, released into the chunk's transaction, which then rolls back: nothing may stay."""

    def over_caps(*, booked: list[Planned]) -> None:
        with connection.cursor() as cursor:
            for over in pg_truth.over_caps(cursor=cursor, proc_ids=[p.proc_id for p in booked]):
                run.stats.record("over_cap", over)

    def once():
        with transaction.atomic(), connection.cursor() as cursor:
            if not rollback:
                return book_chunk(cursor=cursor, plans=plans, after_writes=over_caps)
            with transaction.atomic():
                outcome = book_chunk(cursor=cursor, plans=plans, after_writes=over_caps)
            raise _RolledBack(outcome)

    try:
        outcome = attempt(run=run, where="booking", body=once)
    except _RolledBack as rolled_back:
        booked = rolled_back.args[0].booked
        run.stats.count("faults", "booking-rollback")
        with connection.cursor() as cursor:
            cursor.execute(FRAMES_THERE, {"ids": [p.frame_id for p in booked]})
            for (frame_id,) in cursor.fetchall():
                run.stats.record("rolled_back_booking_visible", frame_id)
        return
    except Lost:
        reconnect(run=run, where="booking")
        _resolve_cut_off_booking(run=run, plans=plans)
        return
    run.stats.add(chunks=1)
    for kind, n in outcome.rejected.items():
        run.stats.count("rejections", kind, n)
    for plan in outcome.booked:
        run.stats.count("bookings", plan.planner)


def _resolve_cut_off_booking(*, run: MaestroRun, plans: list[Planned]) -> None:
    """A chunk whose connection went away at an unknown moment: its frames are never deleted,
    so those that exist are exactly the procs it booked."""
    with connection.cursor() as cursor:
        cursor.execute(FRAMES_THERE, {"ids": [p.frame_id for p in plans]})
        there = {row[0] for row in cursor.fetchall()}
    run.stats.add(bookings_resolved=1)
    for plan in plans:
        if plan.frame_id in there:
            run.stats.count("bookings", plan.planner)


# --- Releasers ---------------------------------------------------------------------------------

PICK_PROCS = """
SELECT pk_proc FROM proc WHERE pk_show = ANY(%(shows)s) AND pk_job <> ALL(%(killed)s::text[])
 ORDER BY random() LIMIT %(n)s
"""


def _pick(*, run: MaestroRun, n: int) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(PICK_PROCS, {"shows": run.farm.show_ids, "killed": sorted(run.killed_jobs.copy()), "n": n})
        return [row[0] for row in cursor.fetchall()]


def _released(*, run: MaestroRun, request: int, kind: str, outcomes: list[bool]) -> None:
    run.stats.count("releases", kind, sum(outcomes))
    run.stats.answer(request, outcome="released" if any(outcomes) else "not found")


def release_through_service(*, run: MaestroRun, proc_ids: list[str], kind: str) -> None:
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


def release_over_http(*, run: MaestroRun, proc_ids: list[str]) -> None:
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


def release_rolled_back(*, run: MaestroRun, proc_ids: list[str]) -> None:
    """release-rollback: the service's batch release inside a savepoint of a caller's transaction
    that then rolls back, savepoint included: nothing may change."""
    request = run.stats.request()
    try:
        with transaction.atomic():
            with transaction.atomic():
                unbook_procs(proc_ids=proc_ids)
            raise _RolledBack
    except _RolledBack:
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


def service_releaser_loop(*, run: MaestroRun, index: int) -> None:
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


def _release_killed_jobs_due(*, run: MaestroRun) -> None:
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


def cuebot_releaser_loop(*, run: MaestroRun, index: int) -> None:
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
    *, run: MaestroRun, proc_ids: list[str], after_table: Callable[..., None] = lambda **_: None
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


# --- The operator --------------------------------------------------------------------------------


def operator_loop(*, run: MaestroRun, index: int) -> None:
    rng, kinds = run.rng("operator", index), itertools.cycle(("subscription", "folder", "job"))
    next_repair = time.monotonic() + run.repair_seconds
    while not run.stop.wait(0.2):
        try:
            if rng.random() < 0.75:
                change_a_cap(run=run, rng=rng, kind=next(kinds))  # in turn: each kind of cap binds early
            else:
                flip_a_flag(run=run, rng=rng)
            if time.monotonic() >= next_repair:
                repair(run=run)
                next_repair = time.monotonic() + run.repair_seconds
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not lost(error=error):
                raise
            reconnect(run=run, where="operator")


def repair(*, run: MaestroRun) -> None:
    """The drift repair under load (accounting.reconcile.recompute, the service's own), over
    every show of the farm; it reruns itself after a deadlock (counted in its metric)."""
    recompute_pg_accounting(show_ids=run.farm.show_ids)
    run.stats.add(repairs=1)


# The flipped show's rows of the five tables with their row versions, locked FOR SHARE in
# Cuebot's order: nobody else can write them until the flip commits, so a version that moved
# in between was written by the flip itself.
SHOW_ROW_VERSIONS = (
    "SELECT 'subscription', pk_subscription, ctid::text FROM subscription WHERE pk_show = %(show)s "
    "ORDER BY pk_subscription FOR SHARE",
    "SELECT 'layer_resource', r.pk_layer_resource, r.ctid::text FROM layer_resource r JOIN job j ON j.pk_job = r.pk_job "
    "WHERE j.pk_show = %(show)s ORDER BY r.pk_layer_resource FOR SHARE OF r",
    "SELECT 'job_resource', r.pk_job_resource, r.ctid::text FROM job_resource r JOIN job j ON j.pk_job = r.pk_job "
    "WHERE j.pk_show = %(show)s ORDER BY r.pk_job_resource FOR SHARE OF r",
    "SELECT 'folder_resource', r.pk_folder_resource, r.ctid::text FROM folder_resource r "
    "JOIN folder f ON f.pk_folder = r.pk_folder WHERE f.pk_show = %(show)s ORDER BY r.pk_folder_resource FOR SHARE OF r",
    "SELECT 'point', pk_point, ctid::text FROM point WHERE pk_show = %(show)s ORDER BY pk_point FOR SHARE",
)


def _row_versions(*, show_id: str) -> dict[tuple[str, str], str]:
    with connection.cursor() as cursor:
        versions = {}
        for sql in SHOW_ROW_VERSIONS:
            cursor.execute(sql, {"show": show_id})
            versions |= {(table, pk): ctid for table, pk, ctid in cursor.fetchall()}
        return versions


def flip_a_flag(*, run: MaestroRun, rng: random.Random) -> None:
    """cueadmin -scheduler-managed SHOW on|off: in this era one UPDATE of show and nothing else;
    the show's accounting rows, held still around it, must come out of it unwritten."""
    show = Show.objects.get(pk=rng.choice(run.farm.show_ids))
    with transaction.atomic():
        before = _row_versions(show_id=show.pk)
        set_scheduler_managed(show=show, managed=not show.b_scheduler_managed)
        after = _row_versions(show_id=show.pk)
    for row in sorted(row for row, version in after.items() if before.get(row) != version):
        run.stats.record("flag_flip_wrote_accounting", (show.pk, *row))
    run.stats.add(flag_flips=1)


def change_a_cap(*, run: MaestroRun, rng: random.Random, kind: str) -> None:
    """A burst, a folder's max cores or GPUs, or a job's, moved by the limit services; often
    below what is booked now, which no later booking may exceed."""
    if kind == "subscription":
        sub = rng.choice(list(Subscription.objects.filter(show_id__in=run.farm.show_ids)))
        # Half the time down to what is booked now, so that the burst binds within seconds.
        burst = sub.int_cores + rng.randint(0, 2) * 100 if rng.random() < 0.5 else sub.int_burst * rng.uniform(0.5, 1.5)
        set_subscription_limits(subscription=sub, burst=max(100, int(burst) // 100 * 100))
    elif kind == "folder":
        fr = rng.choice(list(FolderResource.objects.filter(folder__show_id__in=run.farm.show_ids)))
        set_folder_limits(
            folder_resource=fr,
            max_cores=rng.choice((-1, rng.randint(2, 60) * 100)),
            max_gpus=rng.choice((-1, rng.randint(0, 6))),
        )
    else:
        jr = rng.choice(list(JobResource.objects.filter(job__show_id__in=run.farm.show_ids, job__str_state="PENDING")))
        set_job_limits(job_resource=jr, max_cores=rng.randint(2, 30) * 100, max_gpus=rng.randint(0, 4))
    run.stats.count("cap_changes", kind)


def kill_a_job(*, run: MaestroRun, rng: random.Random) -> bool:
    """As OpenCue kills a job: FINISHED and its name freed first, its procs released later."""
    with connection.cursor() as cursor:
        job_id = finish_a_job(cursor=cursor, show_ids=run.farm.show_ids, rng=rng)
    if job_id is None:
        return False
    with run.lock:
        run.killed_jobs.add(job_id)
        run.kills_due.append((time.monotonic() + rng.uniform(0.5, 2.5), job_id))
    run.stats.count("faults", "job-kill")
    return True


# --- Faults that stop the world, from the main thread ---------------------------------------------


def pg_restart(*, run: MaestroRun) -> None:
    """Every other session of this database ended, as a restart ends them: workers reconnect."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    run.restarted_at = time.monotonic()
    run.stats.count("faults", "pg-restart")


DEADLOCK_PAIR = """
SELECT p.pk_proc, q.pk_proc FROM proc p JOIN host h ON h.pk_host = p.pk_host
  JOIN proc q ON q.pk_show = p.pk_show AND q.pk_proc <> p.pk_proc JOIN host hq ON hq.pk_host = q.pk_host
 WHERE p.pk_show = ANY(%(shows)s) AND NOT p.b_local AND NOT q.b_local AND hq.pk_alloc = h.pk_alloc
   AND p.pk_job <> ALL(%(killed)s::text[]) AND q.pk_job <> ALL(%(killed)s::text[])
 ORDER BY random() LIMIT 1
"""


# One proc's five rows, each a centicore below its sum: drift for the repair to find and lock.
# Lowered, never raised, so no cap trigger looks at it; in Cuebot's table order, one row each.
PROC_ROWS = """
SELECT s.pk_subscription, p.pk_layer, p.pk_job, j.pk_folder, pt.pk_point
  FROM proc p JOIN host h ON h.pk_host = p.pk_host JOIN job j ON j.pk_job = p.pk_job
  JOIN subscription s ON s.pk_show = p.pk_show AND s.pk_alloc = h.pk_alloc
  JOIN point pt ON pt.pk_dept = j.pk_dept AND pt.pk_show = j.pk_show
 WHERE p.pk_proc = %(proc)s
"""
DRIFT_ROWS = (
    "UPDATE subscription SET int_cores = int_cores - 1 WHERE pk_subscription = %s",
    "UPDATE layer_resource SET int_cores = int_cores - 1 WHERE pk_layer = %s",
    "UPDATE job_resource SET int_cores = int_cores - 1 WHERE pk_job = %s",
    "UPDATE folder_resource SET int_cores = int_cores - 1 WHERE pk_folder = %s",
    "UPDATE point SET int_cores = int_cores - 1 WHERE pk_point = %s",
)


def drift_rows_of(*, proc_id: str) -> None:
    """Set the proc's five rows a centicore low, as drift from elsewhere would (an older writer,
    a hand edit): the repair has rows to lock only where something drifted."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(PROC_ROWS, {"proc": proc_id})
        keys = cursor.fetchone()
        for statement, key in zip(DRIFT_ROWS, keys or (), strict=False):
            cursor.execute(statement, [key])


def deadlock_order(*, run: MaestroRun) -> None:
    """The repair, Cuebot's release and this service's release on the same rows at once.

    First the rows of the proc Cuebot's release will take are set to drift: the repair locks
    only the rows it finds drifted, so without drift it would take no lock to order. The
    samples, taken on this thread, do not run until the repair has set them right again.
    Cuebot's release of one proc holds its subscription row (Cuebot's first table) and waits.
    The repair is started and left to run until PostgreSQL has it waiting, directly or behind
    others, on Cuebot's release; then this service's release of another proc of the same
    subscription likewise; then Cuebot's release goes on through layer, job, folder and point.
    A repair (or release) that takes those rows in Cuebot's order waits behind it and nobody
    deadlocks; one that takes a later table first (point before subscription, say) already
    holds what Cuebot's release needs next: a deadlock, every time, counted by whichever side
    PostgreSQL rolls back."""
    with connection.cursor() as cursor:
        cursor.execute(DEADLOCK_PAIR, {"shows": run.farm.show_ids, "killed": sorted(run.killed_jobs.copy())})
        pair = cursor.fetchone()
    if pair is None:
        run.faults.rearm("deadlock-order")
        return
    attempt(run=run, where="deadlock-order drift", body=lambda: drift_rows_of(proc_id=pair[0]))
    holding, go, held_once = threading.Event(), threading.Event(), threading.Event()
    pids: dict[str, int] = {}

    def hold(*, table: str) -> None:
        if table == "subscription" and not held_once.is_set():
            held_once.set()
            holding.set()
            go.wait(LOCK_WAIT_SECONDS * 3)

    def cuebot() -> None:
        pids["cuebot"] = _backend_pid()
        release_with_cuebots_statements(run=run, proc_ids=[pair[0]], after_table=hold)
        holding.set()  # the proc was gone already: nothing held

    def repairing() -> None:
        pids["repair"] = _backend_pid()
        repair(run=run)

    def service() -> None:
        pids["service"] = _backend_pid()
        release_through_service(run=run, proc_ids=[pair[1]], kind="service single")

    # The block's end lets Cuebot's release go on and joins the three against its deadline: each
    # ends on its own then (PostgreSQL breaks a deadlock within a second).
    with Threads(stop=go) as staged:
        cuebot_body = worker(name="deadlock-order cuebot", body=lambda **_: cuebot())
        staged.start(cuebot_body, run=run, index=0, name="deadlock-order-cuebot")
        holding.wait(LOCK_WAIT_SECONDS)
        # Not held: a releaser took the proc between the pick and Cuebot's release (one run in about
        # six on a loaded machine), so nothing orders the others. The repair still runs, to put the
        # drift back, and the fault fires again rather than count a firing that staged nothing.
        held = held_once.is_set()
        for name, body in (("repair", repairing), ("service", service)) if held else (("repair", repairing),):
            staged.start(
                worker(name=name, body=lambda body=body, **_: body()), run=run, index=0, name=f"{SERVICE_THREAD}-{name}"
            )
            _await_blocked_by(
                pids, waiter=name, holder="cuebot", thread=staged.threads[-1], still_holding=staged.threads[0]
            )
    if not held:
        run.faults.rearm("deadlock-order")
        return
    run.stats.count("faults", "deadlock-order")


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _await_blocked_by(
    pids: dict[str, int], *, waiter: str, holder: str, thread: threading.Thread, still_holding: threading.Thread
) -> None:
    """Until the waiter's session waits on the holder's, directly or behind other sessions
    (pg_blocking_pids, followed), or the waiter finished without meeting it (it needed none of
    the held rows), or the holder is gone, or LOCK_WAIT_SECONDS pass."""
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    with connection.cursor() as cursor:
        while time.monotonic() < deadline and thread.is_alive() and still_holding.is_alive():
            if waiter in pids and holder in pids:
                seen, frontier = set(), [pids[waiter]]
                while frontier:
                    cursor.execute("SELECT pg_blocking_pids(%s)", [frontier.pop()])
                    for pid in cursor.fetchone()[0] or ():
                        if pid == pids[holder]:
                            return
                        if pid not in seen:
                            seen.add(pid)
                            frontier.append(pid)
            time.sleep(0.01)  # PostgreSQL announces no lock wait to a bystander: polled
