"""The Redis era's bookers: the scheduler's booking script, then the proc INSERT, then settle
(or rollback), with the crash-after-lua and slow-commit faults at their points, and every
committed booking checked against the caps in force (simulator.invariants)."""

import random
import time
import uuid

from django.db import connection, transaction

from accounting.live import booking
from simulator.farm import LayerRef
from simulator.invariants import over_cap_after_booking
from simulator.report import OverCap
from simulator.workers.redis.play import RedisPlay, redis_errors_counted, worker
from simulator.workers.scheduler_view import HostView, ManagedShows, frame_size, insert_booked_proc, layer_refusal

SLOW_COMMIT_SECONDS = (0.05, 0.3)


def refusal_label(*, result: booking.BookingResult) -> str:
    """A rejection named by the cap that refused it: "subscription burst", "folder gpus"... A
    subscription without a burst is closed to booking (a rebuild, a switch), not at its cap."""
    if result.table == "subscription":
        return "subscription burst" if result.limit else "subscription closed"
    return f"{result.table} {result.unit}" if result.unit else str(result.table)


@worker("booker")
def booker(play: RedisPlay, index: int) -> None:
    rng, managed, hosts = play.rng("booker", index), ManagedShows(play.farm), HostView(play.farm)
    while not play.stop.is_set():
        shows = managed.current()
        if not shows:
            play.stop.wait(0.05)
            continue
        layer = rng.choice(play.farm.layers_by_show[rng.choice(shows)])
        if layer.job_id in play.killed_jobs:
            continue
        cores, gpus = frame_size(rng=rng, layer=layer)
        refused = layer_refusal(layer=layer, cores=cores, gpus=gpus)
        if refused:
            play.stats.count("rejections", refused)
            continue
        host = hosts.pick(rng=rng, cores=cores, gpus=gpus)
        if host is None:
            play.stats.count("rejections", "host")
            continue
        with play.gate.operation():
            book_one(play, rng=rng, layer=layer, host=host, cores=cores, gpus=gpus)


def book_one(
    play: RedisPlay, *, rng: random.Random, layer: LayerRef, host: tuple[str, str], cores: int, gpus: int
) -> None:
    """One scheduler booking: script, INSERT (host claimed in the same transaction), settle."""
    host_id, alloc_id = host
    ids = dict(key_ids(layer=layer, alloc_id=alloc_id), dept_id=layer.dept_id)
    op_id, result, started = uuid.uuid4().hex, None, time.monotonic()
    # What the scheduler's reseed may have left low when this booking's script reads Redis:
    # its last write's, which another write may replace before the check below.
    ignored_before = play.stats.scheduler_ignored_now() if play.reseeder == "scheduler" else {}
    # No master right now (a failover): nothing booked, or, if the reply was lost after the
    # script ran, its in-flight entry expires and Redis stays high until a reseed.
    with redis_errors_counted(play, "book"):
        result = booking.book(**ids, cores=cores, gpus=gpus, op_id=op_id)
    if result is None:
        return
    if not result.ok:
        play.stats.count("rejections", refusal_label(result=result))
        return
    if play.plan.take("crash-after-lua"):
        # The booker dies here: no INSERT, no settle, no rollback. Its in-flight entry
        # expires and the next booked reseed brings Redis back down to SUM(proc).
        play.stats.count("faults", "crash-after-lua")
        return
    if not inserted(play, rng=rng, layer=layer, host_id=host_id, cores=cores, gpus=gpus):
        with redis_errors_counted(play, "rollback"):
            booking.rollback(**ids, cores=cores, gpus=gpus, op_id=op_id)
        play.stats.add(rollbacks=1)
        return
    with redis_errors_counted(play, "settle"):  # unsettled: the entry expires, Redis high meanwhile
        booking.settle(op_id=op_id)
    play.stats.add(bookings=1)
    check = dict(key_ids(layer=layer, alloc_id=alloc_id), gpus=gpus, started=started)
    for violation in over_caps(play, check=check, ignored_before=ignored_before):
        play.stats.record("over_cap", violation)


def key_ids(*, layer: LayerRef, alloc_id: str) -> dict[str, str]:
    return dict(
        show_id=layer.show_id,
        alloc_id=alloc_id,
        folder_id=layer.folder_id,
        job_id=layer.job_id,
        layer_id=layer.layer_id,
    )


def inserted(play: RedisPlay, *, rng: random.Random, layer: LayerRef, host_id: str, cores: int, gpus: int) -> bool:
    """The booking's PostgreSQL half, held open when the slow-commit fault is due; False when it
    failed (the host filled up, a restart), which takes the rollback path."""
    slow = play.plan.take("slow-commit")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            insert_booked_proc(cursor=cursor, layer=layer, host_id=host_id, centicores=cores, gpus=gpus)
            if slow:
                # The straddle window (docs/design.md#lessons), held open: acct:seq already
                # moved, the proc is not yet visible to a reseed's SUM(proc).
                time.sleep(rng.uniform(*SLOW_COMMIT_SECONDS))
                play.stats.count("faults", "slow-commit")
    except Exception:  # noqa: BLE001 - any INSERT failure takes the rollback path
        return False
    return True


def over_caps(play: RedisPlay, *, check: dict, ignored_before: dict[str, tuple[int, int]]) -> list[OverCap]:
    found = over_cap_after_booking(**check)
    if found and play.reseeder == "scheduler":
        found = beyond_scheduler_bound(play, found=found, check=check, ignored_before=ignored_before)
    return found


def beyond_scheduler_bound(
    play: RedisPlay, *, found: list[OverCap], check: dict, ignored_before: dict[str, tuple[int, int]]
) -> list[OverCap]:
    """Of a booking's caps passed (`found`), those it passed by more than the scheduler's own
    reseed lets a key read low: a key that reads low by X admits bookings up to X past its cap
    in SUM(proc). The FINISHED jobs' procs that reseed leaves out are left out of the sums
    (over_cap_after_booking's finished_jobs), and the in-flight amounts its last write of the
    key ignored, as of the booking's start or of now, are taken off. The others are counted,
    not violations."""
    ignored_now = play.stats.scheduler_ignored_now()

    def slack(v: OverCap) -> int:  # a layer's limits are per frame: no counter of theirs reads low
        if v.table == "layer":
            return 0
        return max(ignored.get(v.key, (0, 0))[v.unit == "gpus"] for ignored in (ignored_before, ignored_now))

    beyond = [v for v in over_cap_after_booking(**check, finished_jobs=False) if v.booked - slack(v) > v.cap]
    play.stats.add(over_cap_within_scheduler_bound=len(found) - len(beyond))
    return beyond
