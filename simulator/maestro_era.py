"""`simulate_farm --era maestro`: the Maestro era (OpenCue v1.34.20 and later) played end to end.

Why it exists: in this era Cuebot owns the five accounting tables for every show. Maestro's
bookings add to them and every release, Cuebot's own or this service's, takes off them, in
the transaction that inserts or deletes the procs; the flag only says who plans a show. Both
sides write atomically, so the five tables must equal SUM(proc) in every snapshot, not only
after a repair: this run checks that while Cuebot (bookers playing Maestro's tick, a releaser
with Cuebot's statements; simulator.maestro_cuebot) and this service (releases in process and
over HTTP, cap changes, flag flips, the drift repair) write the same rows under faults.

This module starts the run and judges it: the farm's additions, the role the service's writes
run as, the workers (simulator.maestro_workers: bookers, service releasers in process and over
HTTP, a Cuebot releaser, an operator), the invariants sampled in one REPEATABLE READ snapshot by
the main thread, which also fires the faults that stop the world (pg-restart, deadlock-order),
and the report. The state the threads share is simulator.maestro_run's.
"""

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

from django.db import DatabaseError, connection, connections, transaction
from django.db.backends.signals import connection_created
from prometheus_client import REGISTRY

from shows.attach import grant_statements
from shows.cuebot_schema import TABLES as CUEBOT_TABLES
from simulator import pg_truth
from simulator.farm import PROC_MEM_KB, SimFarm
from simulator.faults import FaultPlan
from simulator.maestro_cuebot import CAP_KINDS
from simulator.maestro_run import FAULT_PERIOD_SECONDS, REPAIR_SECONDS, SERVICE_THREAD, MaestroRun, MaestroStats, worker
from simulator.maestro_workers import (
    booker_loop,
    cuebot_releaser_loop,
    deadlock_order,
    operator_loop,
    pg_restart,
    service_releaser_loop,
)
from simulator.processes import ProcessRefused, WebServer
from simulator.stopping import Threads

SAMPLE_SECONDS = 0.5

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
        faults=FaultPlan(kinds=faults, seconds=seconds, rng=rng, periods=FAULT_PERIOD_SECONDS),
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
    started = time.monotonic()
    run.faults.start()
    with Threads(stop=run.stop) as workers:
        for name, body, i in roles:
            workers.start(worker(name=name, body=body), run=run, index=i, name=f"{name}-{i}")
        next_sample = started + SAMPLE_SECONDS
        while time.monotonic() - started < seconds:
            if run.faults.take("pg-restart"):
                pg_restart(run=run)
            if run.faults.take("deadlock-order"):
                deadlock_order(run=run)
            if time.monotonic() >= next_sample:
                sample(run=run, moment=f"{time.monotonic() - started:.1f}s")  # pg-restart spares this session
                next_sample = time.monotonic() + SAMPLE_SECONDS
            run.stop.wait(0.02)
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
        "flag_flip_wrote_accounting": len(stats.violations["flag_flip_wrote_accounting"]),
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
