"""The NOTIFY era's bookers: the scheduler model books against its own counters (sub burst,
folder and job caps, as booking.lua does), then INSERTs the proc; every committed booking is
checked against the caps in force (simulator.invariants)."""

import random
import time

from django.db import connection, transaction

from accounting.live.units import cores_from_centicores
from simulator.farm import LayerRef
from simulator.invariants import over_cap_after_booking
from simulator.workers.notify.play import NotifyPlay, work
from simulator.workers.scheduler_view import HostFull, HostView, frame_size, insert_booked_proc, layer_refusal


def booker(run: NotifyPlay, index: int) -> None:
    rng, hosts, layers = random.Random(run.options.seed * 100 + index), HostView(run.farm), run.managed_layers()
    work(run, where="booker", step=lambda: book_one(run, rng=rng, hosts=hosts, layer=rng.choice(layers)))


def book_one(run: NotifyPlay, *, rng: random.Random, hosts: HostView, layer: LayerRef) -> None:
    if layer.job_id in run.killed_jobs:
        return  # the scheduler books no more frames of a killed job
    centicores, gpus = frame_size(rng=rng, layer=layer)
    refused = layer_refusal(layer=layer, cores=centicores, gpus=gpus)
    if refused is not None:
        refuse(run, cap=refused)
        return
    host = hosts.pick(rng=rng, cores=centicores, gpus=gpus)
    if host is None:
        return
    host_id, alloc_id = host
    keys = [("sub", f"{layer.show_id}:{alloc_id}"), ("folder", layer.folder_id), ("job", layer.job_id)]
    started = time.monotonic()
    op, refused = run.store.try_book(keys=keys, cores=cores_from_centicores(centicores), gpus=gpus)
    if op is None:
        refuse(run, cap=str(refused))
        return
    if not inserted(run, op=op, layer=layer, host_id=host_id, centicores=centicores, gpus=gpus):
        return
    run.store.committed(op)
    run.stats.add(bookings=1)
    check = dict(
        show_id=layer.show_id,
        alloc_id=alloc_id,
        folder_id=layer.folder_id,
        job_id=layer.job_id,
        layer_id=layer.layer_id,
        gpus=gpus,
        started=started,
    )
    if over_cap_after_booking(**check):
        judge_over_cap(run, keys=keys, check=check, started=started)


def inserted(run: NotifyPlay, *, op: str, layer: LayerRef, host_id: str, centicores: int, gpus: int) -> bool:
    """The booking's PostgreSQL half; on a failure its counters are given back."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            insert_booked_proc(cursor=cursor, layer=layer, host_id=host_id, centicores=centicores, gpus=gpus)
    except HostFull:
        run.store.rolled_back(op)  # the host filled up since the scheduler's view was read
        run.stats.count("rejections", "host full")
        return False
    except Exception:
        # Not committed (or unknown, after a restart: then the store stays high until the recompute).
        run.store.rolled_back(op)
        raise
    return True


def judge_over_cap(run: NotifyPlay, *, keys: list[tuple[str, str]], check: dict, started: float) -> None:
    """A booking whose committed SUM(proc) is past a cap. The era's scheduler leaves a killed
    job's procs out of its recompute while they still run: past a cap only with them, it is
    the era's design (over_cap_by_killed_jobs_procs, reported), not the model's doing. Past a
    cap the model had not heard yet (a change on its way, or lost with a dropped connection:
    the limit reseed, which the model does not play, would bring it): excused."""
    store_key = dict(zip(("subscription", "folder", "job"), keys))
    by_the_eras_count = over_cap_after_booking(**check, finished_jobs=False)
    run.stats.add(over_cap_by_killed_jobs_procs=int(not by_the_eras_count))
    for violation in by_the_eras_count:
        key = store_key.get(violation.table)
        if key is None or run.store.knew_cap(key=key, unit=violation.unit, cap=violation.cap, since=started):
            with run.stats.lock:
                run.stats.over_cap.append(violation)
        else:
            run.stats.add(over_cap_excused=1)


def refuse(run: NotifyPlay, *, cap: str) -> None:
    run.stats.count("rejections", cap)
    run.stop.wait(0.002)  # a full farm: the scheduler waits for capacity rather than spinning
