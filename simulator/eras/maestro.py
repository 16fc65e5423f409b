"""The Maestro era's simulation (OpenCue v1.34.20 and later): Cuebot owns the five accounting
tables for every show. Maestro's bookings add to them and every release, Cuebot's own or this
service's, takes off them, in the transaction that inserts or deletes the procs; the flag only
says who plans a show. Both sides write atomically, so the five tables must equal SUM(proc) in
every snapshot, not only after a repair: the main thread checks that in one REPEATABLE READ
snapshot every half second while Cuebot (Maestro's bookers, a releaser with Cuebot's statements)
and this service (releases in process and over HTTP, cap changes, flag flips, the drift repair,
as a role with the documented grants) write the same rows under faults. Its workers are
simulator.workers.maestro's."""

import random
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from django.db import connection, connections, transaction
from prometheus_client import REGISTRY

from infra.era import MAESTRO
from simulator import pg_truth, service_era
from simulator.era import Role, RunOptions
from simulator.farm import PROC_MEM_KB
from simulator.faults import FaultPlan
from simulator.own_farm import build_sim_farm
from simulator.processes import web_server
from simulator.report import EraReport
from simulator.workers.maestro.booking import booker_loop
from simulator.workers.maestro.cuebot_rows import CAP_KINDS
from simulator.workers.maestro.faults import deadlock_order, pg_restart
from simulator.workers.maestro.operating import operator_loop
from simulator.workers.maestro.play import (
    FAULT_PERIOD_SECONDS,
    MAESTRO_FAULTS,
    REPAIR_SECONDS,
    SERVICE_THREAD,
    MaestroPlay,
    MaestroStats,
    parse_maestro_faults,
    worker,
)
from simulator.workers.maestro.releasing import cuebot_releaser_loop, service_releaser_loop
from simulator.workers.maestro.service_role import role_url, service_role

SAMPLE_SECONDS = 0.5
RETRIES = "cuebot_acct_transaction_retries_total"


@dataclass(frozen=True)
class MaestroEra:
    repair_seconds: float = REPAIR_SECONDS  # between two of the operator's repairs
    name: str = "maestro"
    fault_kinds: tuple[str, ...] = MAESTRO_FAULTS

    def parse_faults(self, text: str) -> tuple[str, ...]:
        return parse_maestro_faults(text=text)

    def refusal(self, options: RunOptions) -> str | None:
        return "--era maestro builds its own farm; --existing is for the Redis era" if options.existing else None

    def wants_http_token(self, options: RunOptions) -> bool:
        return True  # a fifth of the service's releases go through the web server as deployed

    @contextmanager
    def played(self, options: RunOptions) -> Iterator[MaestroPlay]:
        """The era as a site sets it (no accounting Redis written), the farm built and prepared,
        the service's role made and, given a token, the web server started as that role."""
        with service_era.held(MAESTRO), ExitStack() as stack:
            farm = build_sim_farm(
                shows=options.shows, hosts=options.hosts, jobs=options.jobs, rng=random.Random(options.seed)
            )
            rng = random.Random(f"{options.seed}:maestro")
            faults = FaultPlan(kinds=options.faults, seconds=options.seconds, rng=rng, periods=FAULT_PERIOD_SECONDS)
            play = MaestroPlay(
                options=options, farm=farm, stats=MaestroStats(), faults=faults, repair_seconds=self.repair_seconds
            )
            prepare_farm(run=play, rng=rng)
            play.role, password = stack.enter_context(service_role())
            if options.http_token:
                database_url = role_url(role=play.role, password=password)
                play.web = stack.enter_context(web_server(token=options.http_token, database_url=database_url))
            yield play

    def roles(self, play: MaestroPlay) -> list[Role]:
        def role(name: str, body, count: int = 1) -> Role:
            return Role(name, worker(name=name, body=body), count)

        return [
            role("booker", booker_loop, play.options.bookers),
            role(f"{SERVICE_THREAD.removeprefix('sim-')}-releaser", service_releaser_loop, play.options.releasers),
            role("cuebot-releaser", cuebot_releaser_loop),
            role(f"{SERVICE_THREAD.removeprefix('sim-')}-operator", operator_loop),
        ]

    def begin(self, play: MaestroPlay) -> None:
        play.procs_before, play.retries_before = procs(show_ids=play.farm.show_ids), service_retries()
        play.http_retries_before = play.web.counter(RETRIES) if play.web else 0.0
        play.started = time.monotonic()
        play.next_sample = play.started + SAMPLE_SECONDS
        play.faults.start()

    def stop_at(self, play: MaestroPlay) -> float:
        return play.started + play.options.seconds

    def tick(self, play: MaestroPlay) -> float:
        if play.faults.take("pg-restart"):
            pg_restart(run=play)
        if play.faults.take("deadlock-order"):
            deadlock_order(run=play)
        if time.monotonic() >= play.next_sample:
            sample(run=play, moment=f"{time.monotonic() - play.started:.1f}s")  # pg-restart spares this session
            play.next_sample = time.monotonic() + SAMPLE_SECONDS
        return 0.02

    def counts(self, play: MaestroPlay) -> dict[str, int]:
        stats = play.stats
        return {
            "booked": sum(stats.bookings.values()),
            "rejected": sum(stats.rejections.values()),
            "released": sum(stats.releases.values()),
            "faults": sum(stats.faults.values()),
        }

    def report(self, play: MaestroPlay, *, seconds: float) -> EraReport:
        connections.close_all()
        sample(run=play, moment="end")
        deadlocks_in_service = service_retries() - play.retries_before
        if play.web is not None:
            deadlocks_in_service += play.web.counter(RETRIES) - play.http_retries_before
        return EraReport(
            report(
                run=play,
                seconds=seconds,
                procs_after=procs(show_ids=play.farm.show_ids),
                service_deadlocks=int(deadlocks_in_service),
            )
        )


def sample(*, run: MaestroPlay, moment: str) -> None:
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


def prepare_farm(*, run: MaestroPlay, rng: random.Random) -> None:
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


def service_retries() -> float:
    """The service's own reruns after a deadlock, in this process."""
    return sum(
        REGISTRY.get_sample_value(RETRIES, {"operation": op, "sqlstate": "40P01"}) or 0.0
        for op in ("release", "recompute")
    )


def procs(*, show_ids: list[str]) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM proc WHERE pk_show = ANY(%s)", [show_ids])
        return cursor.fetchone()[0]


def invariants(*, run: MaestroPlay, gone: int, service_deadlocks: int) -> dict[str, int]:
    stats = run.stats
    released = sum(stats.releases.values())
    answered_wrong = [request for request, n in stats.answers_by_request.items() if n != 1]
    unanswered = stats.release_requests - len(stats.answers_by_request)
    return {
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


def report(*, run: MaestroPlay, seconds: float, procs_after: int, service_deadlocks: int) -> dict:
    stats = run.stats
    booked, released = sum(stats.bookings.values()), sum(stats.releases.values())
    gone = run.procs_before + booked - procs_after
    judged = invariants(run=run, gone=gone, service_deadlocks=service_deadlocks)
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
        "procs": {"before": run.procs_before, "booked": booked, "after": procs_after, "gone": gone},
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
        "service_role": run.role,
        "http_releases": run.web is not None,
        "violations": violation_examples(stats=stats),
        "invariants": judged,
        "ok": not any(judged.values()),
    }


def violation_examples(*, stats: MaestroStats) -> dict[str, list]:
    """The first few violations of each invariant that failed."""
    return {
        name: [list(map(str, v)) if isinstance(v, tuple) else str(v) for v in items[:5]]
        for name, items in stats.violations.items()
        if items
    }
