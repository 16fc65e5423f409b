"""`simulate_farm --era maestro`: the Maestro era (OpenCue v1.34.20 and later) played end to end.

Why it exists: in this era Cuebot owns the five accounting tables for every show. Maestro's
bookings add to them and every release, Cuebot's own or this service's, takes off them, in
the transaction that inserts or deletes the procs; the flag only says who plans a show. Both
sides write atomically, so the five tables must equal SUM(proc) in every snapshot, not only
after a repair: this run checks that while Cuebot (bookers playing Maestro's tick, a releaser
with Cuebot's statements; simulator.maestro_cuebot) and this service (releases in process and
over HTTP, cap changes, flag flips, the drift repair) write the same rows under faults.

Workers: bookers (a tick: hosts read, procs planned, host-aligned chunks each its own
transaction), service releasers (unbook_proc / unbook_procs as the service's role; a share over
HTTP when the web server runs; the killed jobs' procs), a Cuebot releaser, and an operator
(flags, caps, the repair). The main thread samples the invariants in one REPEATABLE READ
snapshot and fires the faults that stop the world (pg-restart, deadlock-order); each other
fault fires at its worker's own point.
"""

import itertools
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg
from django.db import DatabaseError, IntegrityError, connection, connections, transaction
from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db.backends.signals import connection_created
from prometheus_client import REGISTRY

from accounting.limits.changes import set_folder_limits, set_job_limits, set_subscription_limits
from accounting.models import FolderResource, JobResource, Subscription
from accounting.ownership.toggle import set_scheduler_managed
from accounting.reconcile.recompute import recompute_pg_accounting
from accounting.release.unbook import unbook_proc, unbook_procs
from shows.attach import grant_statements
from shows.cuebot_schema import TABLES as CUEBOT_TABLES
from shows.models import Show
from simulator import pg_truth
from simulator.farm import PROC_MEM_KB, LayerRef, SimFarm
from simulator.farm_builder import PROC_CORES
from simulator.maestro_cuebot import CAP_KINDS, Planned, book_chunk, cuebot_release
from simulator.processes import ProcessRefused, WebServer

MAESTRO_FAULTS = ("job-kill", "pg-restart", "release-rollback", "booking-rollback", "deadlock-order", "flag-flip")
# Mean seconds between two firings; every selected kind fires at least once, none in the last fifth.
FAULT_PERIOD_SECONDS = {
    "job-kill": 3.0,
    "pg-restart": 6.0,
    "release-rollback": 1.0,
    "booking-rollback": 1.0,
    "deadlock-order": 5.0,
    "flag-flip": 2.0,
}
SAMPLE_SECONDS = 0.5
REPAIR_SECONDS = 2.0
TICK_HOSTS = 6  # hosts a tick plans on
CHUNK_HOSTS = 2  # hosts per chunk (its own transaction)
LOCAL_SHARE = 0.15  # bookings on a host with a local reservation that go to the reservation
HTTP_SHARE = 0.2  # service releases sent over HTTP when the web server runs
DEADLOCK_ATTEMPTS = 10  # a deadlock victim rolled back whole: run again, up to this many times in all
LOCK_WAIT_SECONDS = 5.0
SERVICE_THREAD = "sim-maestro-service"  # threads whose connections take the service's role

T = TypeVar("T")


def parse_maestro_faults(*, text: str) -> tuple[str, ...]:
    if text == "all":
        return MAESTRO_FAULTS
    if text in ("", "none"):
        return ()
    kinds = tuple(dict.fromkeys(kind.strip() for kind in text.split(",") if kind.strip()))
    unknown = [kind for kind in kinds if kind not in MAESTRO_FAULTS]
    if unknown:
        raise ValueError(
            f"unknown fault(s) for --era maestro: {', '.join(unknown)}; one of {', '.join(MAESTRO_FAULTS)}"
        )
    return kinds


class FaultClock:
    """When each selected fault is due: drawn from the seed, in the first four fifths of the run;
    `take` is True once per firing whose time has come, for the first worker that asks."""

    def __init__(self, *, kinds: tuple[str, ...], seconds: float, rng: random.Random) -> None:
        self.kinds = kinds
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._due = {
            kind: sorted(
                rng.uniform(0.05 * seconds, 0.8 * seconds)
                for _ in range(max(1, round(0.8 * seconds / FAULT_PERIOD_SECONDS[kind])))
            )
            for kind in kinds
        }

    def start(self) -> None:
        self._started = time.monotonic()

    def take(self, kind: str) -> bool:
        with self._lock:
            due = self._due.get(kind)
            if not due or time.monotonic() - self._started < due[0]:
                return False
            due.pop(0)
            return True

    def rearm(self, kind: str) -> None:
        with self._lock:
            self._due.setdefault(kind, []).insert(0, 0.0)

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {kind: len(times) for kind, times in self._due.items() if times}


@dataclass
class MaestroStats:
    bookings: Counter = field(default_factory=Counter)  # by planner: maestro, dispatcher, local
    chunks: int = 0
    rejections: Counter = field(default_factory=Counter)  # by cap kind (maestro_cuebot.CAP_KINDS)
    releases: Counter = field(default_factory=Counter)  # procs released, by kind of releaser
    release_requests: int = 0
    release_answers: Counter = field(default_factory=Counter)  # by outcome
    release_unknown: int = 0  # procs of requests whose connection was lost: outcome unknown
    faults: Counter = field(default_factory=Counter)
    samples: int = 0
    deadlocks: Counter = field(default_factory=Counter)  # 40P01 seen by this run's own workers, by where
    retries: Counter = field(default_factory=Counter)  # transactions run again after a deadlock
    lost_connections: Counter = field(default_factory=Counter)
    bookings_resolved: int = 0  # chunks whose commit was cut off, looked up afterwards
    repairs: int = 0
    cap_changes: Counter = field(default_factory=Counter)
    flag_flips: int = 0
    violations: dict[str, list] = field(default_factory=lambda: defaultdict(list))
    deadlock_details: list[str] = field(default_factory=list)
    answers_by_request: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, counter: str, key: str, n: int = 1) -> None:
        with self.lock:
            getattr(self, counter)[key] += n

    def add(self, **amounts: int) -> None:
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def record(self, invariant: str, item: object) -> None:
        with self.lock:
            self.violations[invariant].append(item)

    def note_deadlock(self, text: str) -> None:
        """The first few deadlocks' own words (PostgreSQL names both sides' waits), for the report."""
        with self.lock:
            if len(self.deadlock_details) < 5:
                self.deadlock_details.append(" ".join(text.split()))

    def request(self) -> int:
        with self.lock:
            self.release_requests += 1
            return self.release_requests

    def answer(self, request: int, *, outcome: str) -> None:
        with self.lock:
            self.answers_by_request[request] += 1
            self.release_answers[outcome] += 1


@dataclass
class MaestroRun:
    farm: SimFarm
    stats: MaestroStats
    faults: FaultClock
    seed: int
    web: WebServer | None = None
    repair_seconds: float = REPAIR_SECONDS  # between two of the operator's repairs
    stop: threading.Event = field(default_factory=threading.Event)
    killed_jobs: set[str] = field(default_factory=set)
    kills_due: list[tuple[float, str]] = field(default_factory=list)  # (when its procs go, job id)
    reservations: dict[str, list[str]] = field(default_factory=dict)  # host id -> jobs reserved on it
    layers_by_job: dict[str, list[LayerRef]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rng(self, role: str, index: int = 0) -> random.Random:
        return random.Random(f"{self.seed}:{role}:{index}")

    def layers(self) -> list[LayerRef]:
        return [layer for show in self.farm.show_ids for layer in self.farm.layers_by_show.get(show, [])]


# --- Outcomes of a transaction ---------------------------------------------------------------


class Lost(Exception):
    """The connection went away mid-transaction (a PostgreSQL restart): the outcome is unknown,
    so nothing is retried blindly; the caller looks up what committed, where it can."""


def _sqlstate(*, error: BaseException) -> str | None:
    return getattr(error.__cause__, "sqlstate", None) or getattr(error, "sqlstate", None)


def _lost(*, error: BaseException) -> bool:
    """A terminated session (57P01 and kin), a closed socket, a connection Django already gave up."""
    if isinstance(error, DjangoInterfaceError | psycopg.InterfaceError):
        return True
    if isinstance(error, DjangoOperationalError | psycopg.OperationalError):
        state = _sqlstate(error=error)
        return state is None or state.startswith(("57P", "08"))
    return False


def attempt(*, run: MaestroRun, where: str, body: Callable[[], T]) -> T:
    """Run `body` (it opens its own transaction). A deadlock victim was rolled back whole, so
    running it again is safe and it is, counted; a lost connection is raised as Lost."""
    attempts = 1
    while True:
        try:
            return body()
        except (DjangoOperationalError, psycopg.OperationalError) as error:
            if _sqlstate(error=error) != "40P01":
                if _lost(error=error):
                    raise Lost(where) from error
                raise
            run.stats.count("deadlocks", where)
            run.stats.note_deadlock(f"{where}: {error.__cause__ or error}")
            if attempts == DEADLOCK_ATTEMPTS:
                run.stats.record("deadlocks_not_retried", where)
                raise
            run.stats.count("retries", where)
            attempts += 1
        except DjangoInterfaceError as error:
            raise Lost(where) from error


def _reconnect(*, run: MaestroRun, where: str) -> None:
    run.stats.count("lost_connections", where)
    connections.close_all()


def _worker(*, name: str, body: Callable[..., None]) -> Callable[..., None]:
    """Run a worker's loop; an unexpected exception is a failed invariant, never silent."""

    def run_worker(*, run: MaestroRun, index: int) -> None:
        try:
            body(run=run, index=index)
        except Exception as error:  # noqa: BLE001 - reported as worker_errors
            run.stats.record("worker_errors", f"{name} {index}: {type(error).__name__}: {error}")
        finally:
            connections.close_all()

    return run_worker


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
            if not _lost(error=error):
                raise
            _reconnect(run=run, where="booker")
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
        _reconnect(run=run, where="booking")
        _resolve_cut_off_booking(run=run, plans=plans)
        return
    except IntegrityError as error:
        run.stats.count("rejections", f"refused by PostgreSQL: {str(error).splitlines()[0][:60]}")
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
        _reconnect(run=run, where=kind)
        return
    _released(run=run, request=request, kind=kind, outcomes=outcomes)


def release_over_http(*, run: MaestroRun, proc_ids: list[str]) -> None:
    """The same release through the web server as deployed; one response per request."""
    assert run.web is not None
    request = run.stats.request()
    kind = "service http batch" if len(proc_ids) > 1 else "service http single"
    try:
        outcomes = run.web.release(proc_ids)
    except (RuntimeError, OSError):
        # A 500 (its connection ended by a restart) or a broken socket: the outcome is unknown.
        run.stats.answer(request, outcome="http failed")
        run.stats.add(release_unknown=len(proc_ids))
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
        if not _lost(error=error) and _sqlstate(error=error) != "40P01":
            raise
        if _sqlstate(error=error) == "40P01":
            run.stats.count("deadlocks", "release-rollback")  # rolled back as it was meant to be: no rerun
        run.stats.answer(request, outcome="rolled back")  # by PostgreSQL instead: nothing changed either way
        _reconnect(run=run, where="release-rollback")


def service_releaser_loop(*, run: MaestroRun, index: int) -> None:
    rng = run.rng("service releaser", index)
    while not run.stop.is_set():
        try:
            _release_killed_jobs_due(run=run)
            proc_ids = _pick(run=run, n=rng.randint(2, 8) if rng.random() < 0.2 else 1)
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not _lost(error=error):
                raise
            _reconnect(run=run, where="service releaser")
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
            if not _lost(error=error):
                raise
            _reconnect(run=run, where="cuebot releaser")
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
        _reconnect(run=run, where="cuebot release")
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
            if not _lost(error=error):
                raise
            _reconnect(run=run, where="operator")


def repair(*, run: MaestroRun) -> None:
    """The drift repair under load (accounting.reconcile.recompute, the service's own), over
    every show of the farm; it reruns itself after a deadlock (counted in its metric)."""
    recompute_pg_accounting(show_ids=run.farm.show_ids)
    run.stats.add(repairs=1)


def flip_a_flag(*, run: MaestroRun, rng: random.Random) -> None:
    """cueadmin -scheduler-managed SHOW on|off: in this era one UPDATE of show, no accounting."""
    show = Show.objects.get(pk=rng.choice(run.farm.show_ids))
    set_scheduler_managed(show=show, managed=not show.b_scheduler_managed)
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


KILLABLE = """
SELECT j.pk_job FROM job j WHERE j.pk_show = ANY(%(shows)s) AND j.str_state <> 'FINISHED'
   AND EXISTS (SELECT 1 FROM proc p WHERE p.pk_job = j.pk_job) ORDER BY j.pk_job
"""


def kill_a_job(*, run: MaestroRun, rng: random.Random) -> bool:
    """As OpenCue kills a job: FINISHED and its name freed first, its procs released later."""
    with connection.cursor() as cursor:
        cursor.execute(KILLABLE, {"shows": run.farm.show_ids})
        candidates = [row[0] for row in cursor.fetchall()]
        if not candidates:
            return False
        job_id = rng.choice(candidates)
        cursor.execute(
            "UPDATE job SET str_state = 'FINISHED', str_visible_name = NULL, ts_stopped = now() WHERE pk_job = %s",
            [job_id],
        )
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
    run.stats.count("faults", "pg-restart")


DEADLOCK_PAIR = """
SELECT p.pk_proc, q.pk_proc FROM proc p JOIN host h ON h.pk_host = p.pk_host
  JOIN proc q ON q.pk_show = p.pk_show AND q.pk_proc <> p.pk_proc JOIN host hq ON hq.pk_host = q.pk_host
 WHERE p.pk_show = ANY(%(shows)s) AND NOT p.b_local AND NOT q.b_local AND hq.pk_alloc = h.pk_alloc
   AND p.pk_job <> ALL(%(killed)s::text[]) AND q.pk_job <> ALL(%(killed)s::text[])
 ORDER BY random() LIMIT 1
"""


def deadlock_order(*, run: MaestroRun) -> None:
    """The repair, Cuebot's release and this service's release on the same rows at once.

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

    first = threading.Thread(
        target=_worker(name="deadlock-order cuebot", body=lambda **_: cuebot()), kwargs={"run": run, "index": 0}
    )
    first.start()
    holding.wait(LOCK_WAIT_SECONDS)
    threads = [first]
    for name, body in (("repair", repairing), ("service", service)):
        thread = threading.Thread(
            target=_worker(name=name, body=lambda body=body, **_: body()),
            kwargs={"run": run, "index": 0},
            name=f"{SERVICE_THREAD}-{name}",
        )
        thread.start()
        threads.append(thread)
        _await_blocked_by(pids, waiter=name, holder="cuebot", thread=thread, still_holding=first)
    go.set()
    for thread in threads:
        thread.join()
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


# --- Samples: the invariants in one snapshot -------------------------------------------------------


def sample(*, run: MaestroRun, moment: str) -> None:
    """In one REPEATABLE READ snapshot: every row of the five tables equals SUM(proc), and every
    host's (and local reservation's) idle amounts equal its capacity minus its procs."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        drift = pg_truth.mismatches_in(cursor=cursor, show_ids=run.farm.show_ids)
        idle = pg_truth.host_idle_drift(cursor=cursor, host_ids=run.farm.host_ids)
    run.stats.add(samples=1)
    for row in drift:
        run.stats.record("tables_differ_from_sum_proc", (moment, *row))
    for row in idle:
        run.stats.record("host_idle_differs", (moment, *row))


# --- The run -----------------------------------------------------------------------------------------

RESERVATION = """
INSERT INTO host_local (pk_host_local, pk_job, pk_host, str_type, int_cores_max, int_cores_idle, int_mem_max,
                        int_mem_idle, int_gpus_max, int_gpus_idle)
SELECT %(id)s, %(job)s, %(host)s, 'JOB_PARTITION', %(cores)s, %(cores)s, %(mem)s, %(mem)s, %(gpus)s, %(gpus)s
"""
TIGHT_LAYERS = "UPDATE layer SET int_cores_max = 200, int_gpus_max = 1 WHERE pk_layer = ANY(%(layers)s)"
GPU_CAPS_FOLDERS = (
    "UPDATE folder_resource SET int_max_gpus = %(gpus)s WHERE pk_folder = %(folder)s AND int_max_gpus = -1"
)
GPU_CAPS_JOBS = "UPDATE job_resource SET int_max_gpus = %(gpus)s WHERE pk_job = %(job)s AND int_max_gpus = 100"


def prepare_farm(*, run: MaestroRun, rng: random.Random) -> None:
    """What the shared farm leaves out and this era plays: a local reservation for some jobs on
    one host each, layers whose per-frame limits bind (2 cores, 1 GPU), and GPU caps on the
    folders and jobs still at their defaults (-1 and 100, which no farm of this size reaches)."""
    layers = run.layers()
    for layer in layers:
        run.layers_by_job.setdefault(layer.job_id, []).append(layer)
    jobs = sorted(run.layers_by_job)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(TIGHT_LAYERS, {"layers": [layer.layer_id for layer in layers if rng.random() < 0.25]})
        for folder_id in sorted({layer.folder_id for layer in layers}):
            cursor.execute(GPU_CAPS_FOLDERS, {"folder": folder_id, "gpus": rng.randint(1, 6)})
        for job_id in jobs:
            cursor.execute(GPU_CAPS_JOBS, {"job": job_id, "gpus": rng.randint(1, 3)})
        for job_id in rng.sample(jobs, max(1, len(jobs) // 4)):
            host_id = rng.choice(run.farm.host_ids)
            gpus = 2 if host_id in run.farm.gpu_host_ids else 0
            cursor.execute(
                RESERVATION,
                {
                    "id": str(uuid.uuid4()),
                    "job": job_id,
                    "host": host_id,
                    "cores": 800,
                    "mem": 8 * PROC_MEM_KB,
                    "gpus": gpus,
                },
            )
            run.reservations.setdefault(host_id, []).append(job_id)


@contextmanager
def service_role(*, prefix: str = "sim_service") -> Iterator[tuple[str, str]]:
    """A role made for the run with exactly the grants docs/attaching.md gives the service
    (shows.attach.grant_statements) and the project's own tables (which a site's role owns,
    having migrated them): the service's releases, cap changes, flips and repairs run as it.
    Yields (role, password); dropped, grants and all, when the run ends."""
    role, password = f"{prefix}_{uuid.uuid4().hex[:12]}", uuid.uuid4().hex
    with connection.cursor() as cursor:
        try:
            cursor.execute(f"CREATE ROLE {role} LOGIN PASSWORD %s", [password])
        except DatabaseError as error:
            raise ProcessRefused(
                "simulate_farm --era maestro releases as a role it makes with the service's documented grants, "
                f"and this database user may not make one: {str(error).splitlines()[0]}"
            ) from None
        for statement in grant_statements(role=role):
            cursor.execute(statement)
        cursor.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND NOT tablename = ANY(%s)",
            [list(CUEBOT_TABLES)],
        )
        own = [row[0] for row in cursor.fetchall()]
        if own:
            cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {', '.join(own)} TO {role}")
        cursor.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role}")

    def take_role(sender, connection, **kwargs) -> None:
        if threading.current_thread().name.startswith(SERVICE_THREAD):
            connection.connection.execute(f"SET ROLE {role}")

    connection_created.connect(take_role, dispatch_uid=f"simulator.maestro_era.{role}", weak=False)
    try:
        yield role, password
    finally:
        connection_created.disconnect(dispatch_uid=f"simulator.maestro_era.{role}")
        connections.close_all()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND pid <> pg_backend_pid()",
                [role],
            )
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


def _service_retries() -> float:
    return sum(
        REGISTRY.get_sample_value("cuebot_acct_transaction_retries_total", {"operation": op, "sqlstate": "40P01"})
        or 0.0
        for op in ("release", "recompute")
    )


def _procs(*, show_ids: list[str]) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM proc WHERE pk_show = ANY(%s)", [show_ids])
        return cursor.fetchone()[0]


def run_maestro_simulation(
    *,
    farm: SimFarm,
    seconds: float,
    bookers: int,
    releasers: int,
    faults: tuple[str, ...],
    seed: int,
    web: Callable[[str], AbstractContextManager[WebServer]] | None = None,
    repair_seconds: float = REPAIR_SECONDS,
) -> dict:
    """Run the workers for `seconds` on `farm` (built by the caller, who holds the Maestro era's
    settings) and return the report. `web`, given the service role's database URL, starts the
    web server the HTTP releases go through."""
    rng = random.Random(f"{seed}:maestro")
    stats = MaestroStats()
    run = MaestroRun(
        farm=farm,
        stats=stats,
        faults=FaultClock(kinds=faults, seconds=seconds, rng=rng),
        seed=seed,
        repair_seconds=repair_seconds,
    )
    prepare_farm(run=run, rng=rng)
    with ExitStack() as stack:
        role, password = stack.enter_context(service_role())
        if web is not None:
            run.web = stack.enter_context(web(_role_url(role=role, password=password)))
        return _run(run=run, seconds=seconds, bookers=bookers, releasers=releasers, role=role)


def _role_url(*, role: str, password: str) -> str:
    db = connection.settings_dict
    return f"postgres://{role}:{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}"


def _run(*, run: MaestroRun, seconds: float, bookers: int, releasers: int, role: str) -> dict:
    farm = run.farm
    procs_before, retries_before = _procs(show_ids=farm.show_ids), _service_retries()
    http_retries_before = run.web.counter("cuebot_acct_transaction_retries_total") if run.web else 0.0
    roles = (
        [("booker", booker_loop, i) for i in range(bookers)]
        + [(f"{SERVICE_THREAD}-releaser", service_releaser_loop, i) for i in range(releasers)]
        + [("cuebot-releaser", cuebot_releaser_loop, 0), (f"{SERVICE_THREAD}-operator", operator_loop, 0)]
    )
    threads = [
        threading.Thread(
            target=_worker(name=name, body=body), kwargs={"run": run, "index": i}, name=f"{name}-{i}", daemon=True
        )
        for name, body, i in roles
    ]
    started = time.monotonic()
    run.faults.start()
    for thread in threads:
        thread.start()
    next_sample = started + SAMPLE_SECONDS
    try:
        while time.monotonic() - started < seconds:
            if run.faults.take("pg-restart"):
                pg_restart(run=run)
            if run.faults.take("deadlock-order"):
                deadlock_order(run=run)
            if time.monotonic() >= next_sample:
                sample(run=run, moment=f"{time.monotonic() - started:.1f}s")  # pg-restart spares this session
                next_sample = time.monotonic() + SAMPLE_SECONDS
            run.stop.wait(0.02)
    finally:
        run.stop.set()
        for thread in threads:
            thread.join()
    elapsed = time.monotonic() - started
    connections.close_all()
    sample(run=run, moment="end")
    procs_after = _procs(show_ids=farm.show_ids)
    deadlocks_in_service = _service_retries() - retries_before
    if run.web is not None:
        deadlocks_in_service += run.web.counter("cuebot_acct_transaction_retries_total") - http_retries_before
    return report(
        run=run,
        seconds=elapsed,
        procs_before=procs_before,
        procs_after=procs_after,
        service_deadlocks=int(deadlocks_in_service),
        role=role,
    )


def report(
    *, run: MaestroRun, seconds: float, procs_before: int, procs_after: int, service_deadlocks: int, role: str
) -> dict:
    stats = run.stats
    booked, released = sum(stats.bookings.values()), sum(stats.releases.values())
    gone = procs_before + booked - procs_after
    answered_wrong = [request for request, n in stats.answers_by_request.items() if n != 1]
    unanswered = stats.release_requests - len(stats.answers_by_request)
    invariants = {
        "tables_differ_from_sum_proc": len(stats.violations["tables_differ_from_sum_proc"]),
        "host_idle_differs": len(stats.violations["host_idle_differs"]),
        "over_cap": len(stats.violations["over_cap"]),
        # Every writer takes Cuebot's lock order, so none may deadlock with another.
        "lock_order_deadlocks": sum(stats.deadlocks.values()) + service_deadlocks,
        "deadlocks_not_retried": len(stats.violations["deadlocks_not_retried"]),
        "releases_not_answered_once": len(answered_wrong) + unanswered,
        # Exactly what went, unless a request lost its connection (then at most that many more).
        "released_differs_from_gone": int(not released <= gone <= released + stats.release_unknown),
        "rolled_back_booking_visible": len(stats.violations["rolled_back_booking_visible"]),
        "worker_errors": len(stats.violations["worker_errors"]),
    }
    return {
        "era": "maestro",
        "seconds": round(seconds, 1),
        "faults": dict(stats.faults),
        "faults_pending": run.faults.pending(),
        "bookings": booked,
        "bookings_by_planner": dict(stats.bookings),
        "chunks": stats.chunks,
        "rejections": {kind: stats.rejections[kind] for kind in CAP_KINDS}
        | {k: v for k, v in stats.rejections.items() if k not in CAP_KINDS},
        "releases": released,
        "releases_by_kind": dict(stats.releases),
        "release_requests": stats.release_requests,
        "release_answers": dict(stats.release_answers),
        "release_outcome_unknown": stats.release_unknown,
        "procs": {"before": procs_before, "booked": booked, "after": procs_after, "gone": gone},
        "samples": stats.samples,
        "deadlocks": dict(stats.deadlocks)
        | ({"service (its own reruns)": service_deadlocks} if service_deadlocks else {}),
        "deadlock_retries": dict(stats.retries),
        "deadlock_details": stats.deadlock_details,
        "lost_connections": dict(stats.lost_connections),
        "cut_off_bookings_resolved": stats.bookings_resolved,
        "repairs": stats.repairs,
        "cap_changes": dict(stats.cap_changes),
        "flag_flips": stats.flag_flips,
        "service_role": role,
        "http_releases": run.web is not None,
        "violations": {
            name: [list(map(str, v)) if isinstance(v, tuple) else str(v) for v in items[:5]]
            for name, items in stats.violations.items()
            if items
        },
        "invariants": invariants,
        "ok": not any(invariants.values()),
    }
