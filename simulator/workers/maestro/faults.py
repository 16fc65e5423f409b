"""The Maestro era's faults that stop the world, fired by the main thread: pg-restart (every
other session of the database ended) and deadlock-order (the repair, Cuebot's release and this
service's release staged on the same rows at once)."""

import threading
import time

from django.db import connection, transaction

from simulator.stopping import Threads
from simulator.workers.maestro.operating import repair
from simulator.workers.maestro.play import SERVICE_THREAD, MaestroPlay, attempt, worker
from simulator.workers.maestro.releasing import release_through_service, release_with_cuebots_statements

LOCK_WAIT_SECONDS = 5.0


def pg_restart(*, run: MaestroPlay) -> None:
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


def deadlock_order(*, run: MaestroPlay) -> None:
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
    if staged(writers=Writers(run=run, held_proc=pair[0], other_proc=pair[1])):
        run.stats.count("faults", "deadlock-order")
    else:
        run.faults.rearm("deadlock-order")


class Writers:
    """The three writers deadlock-order stages, each run in a thread of its own: Cuebot's release
    of `held_proc` (which stops holding its subscription row until `go`), the repair, and this
    service's release of `other_proc`; `pids` are their sessions'."""

    def __init__(self, *, run: MaestroPlay, held_proc: str, other_proc: str) -> None:
        self.run, self.held_proc, self.other_proc = run, held_proc, other_proc
        self.holding, self.go, self.held_once = threading.Event(), threading.Event(), threading.Event()
        self.pids: dict[str, int] = {}

    def hold(self, *, table: str) -> None:
        if table == "subscription" and not self.held_once.is_set():
            self.held_once.set()
            self.holding.set()
            self.go.wait(LOCK_WAIT_SECONDS * 3)

    def cuebot(self) -> None:
        self.pids["cuebot"] = _backend_pid()
        release_with_cuebots_statements(run=self.run, proc_ids=[self.held_proc], after_table=self.hold)
        self.holding.set()  # the proc was gone already: nothing held

    def repairing(self) -> None:
        self.pids["repair"] = _backend_pid()
        repair(run=self.run)

    def service(self) -> None:
        self.pids["service"] = _backend_pid()
        release_through_service(run=self.run, proc_ids=[self.other_proc], kind="service single")


def staged(*, writers: Writers) -> bool:
    """Cuebot's release started and left holding; then the repair and the service's release, each
    until it waits on Cuebot's. False when Cuebot's release held nothing."""
    run = writers.run
    # The block's end lets Cuebot's release go on and joins the three against its deadline: each
    # ends on its own then (PostgreSQL breaks a deadlock within a second).
    with Threads(stop=writers.go) as threads:
        cuebot_body = worker(name="deadlock-order cuebot", body=lambda **_: writers.cuebot())
        threads.start(cuebot_body, run=run, index=0, name="deadlock-order-cuebot")
        writers.holding.wait(LOCK_WAIT_SECONDS)
        # Not held: a releaser took the proc between the pick and Cuebot's release (one run in about
        # six on a loaded machine), so nothing orders the others. The repair still runs, to put the
        # drift back, and the fault fires again rather than count a firing that staged nothing.
        held = writers.held_once.is_set()
        for name, body in (
            (("repair", writers.repairing), ("service", writers.service)) if held else (("repair", writers.repairing),)
        ):
            threads.start(
                worker(name=name, body=lambda body=body, **_: body()), run=run, index=0, name=f"{SERVICE_THREAD}-{name}"
            )
            _await_blocked_by(
                writers.pids, waiter=name, holder="cuebot", thread=threads.threads[-1], still_holding=threads.threads[0]
            )
    return held


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
