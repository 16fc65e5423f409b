"""Maestro's bookers in the Maestro era: a tick reads PostgreSQL afresh, plans procs on a few
hosts (a flagged show's by Maestro, an unflagged one's by Cuebot's legacy dispatcher, some on a
job's local reservation), then books them in host-aligned chunks with Cuebot's statements, with
the booking-rollback and flag-flip faults at their points."""

import random

from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connection, transaction

from simulator import pg_truth
from simulator.farm import PROC_MEM_KB, LayerRef
from simulator.farm_builder import PROC_CORES
from simulator.workers.maestro.cuebot_booking import book_chunk
from simulator.workers.maestro.cuebot_rows import Planned
from simulator.workers.maestro.operating import flip_a_flag
from simulator.workers.maestro.play import Lost, MaestroPlay, attempt, lost, reconnect

TICK_HOSTS = 6  # hosts a tick plans on
CHUNK_HOSTS = 2  # hosts per chunk (its own transaction)
LOCAL_SHARE = 0.15  # bookings on a host with a local reservation that go to the reservation

TICK_HOSTS_SQL = """
SELECT pk_host, pk_alloc, int_cores_idle, int_gpus_idle FROM host
 WHERE pk_host = ANY(%(hosts)s) AND int_cores_idle >= %(cores)s AND int_mem_idle >= %(mem)s ORDER BY pk_host
"""


def booker_loop(*, run: MaestroPlay, index: int) -> None:
    rng, layers = run.rng("booker", index), run.layers()
    while not run.stop.is_set():
        try:
            tick(run=run, rng=rng, layers=layers)
        except (DjangoOperationalError, DjangoInterfaceError) as error:
            if not lost(error=error):
                raise
            reconnect(run=run, where="booker")
        run.stop.wait(0.005)


def tick(*, run: MaestroPlay, rng: random.Random, layers: list[LayerRef]) -> None:
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
    *, run: MaestroPlay, rng: random.Random, host: tuple, layers: list[LayerRef], flagged: set[str]
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


def book(*, run: MaestroPlay, plans: list[Planned], rollback: bool) -> None:
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


def _resolve_cut_off_booking(*, run: MaestroPlay, plans: list[Planned]) -> None:
    """A chunk whose connection went away at an unknown moment: its frames are never deleted,
    so those that exist are exactly the procs it booked."""
    with connection.cursor() as cursor:
        cursor.execute(FRAMES_THERE, {"ids": [p.frame_id for p in plans]})
        there = {row[0] for row in cursor.fetchall()}
    run.stats.add(bookings_resolved=1)
    for plan in plans:
        if plan.frame_id in there:
            run.stats.count("bookings", plan.planner)
