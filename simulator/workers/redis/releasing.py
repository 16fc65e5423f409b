"""The Redis era's releasers (Cuebot): random procs that ran long enough, one call or a batch,
with the pg-rollback, publish-drop, http-release and release-stall faults at their points."""

import time

from django.db import connection, transaction

from accounting.release.types import Branch
from accounting.release.unbook import unbook_proc, unbook_procs
from simulator.workers.redis.play import RedisPlay, transient, worker
from simulator.workers.scheduler_view import FRAME_SECONDS, PICK_PROCS


class InjectedRollback(Exception):
    """Raised inside a release transaction to roll it back after the DELETE (pg-rollback)."""


@worker("releaser")
def releaser(play: RedisPlay, index: int) -> None:
    rng = play.rng("releaser", index)
    while not play.stop.is_set():
        n = rng.randint(2, 20) if rng.random() < 0.2 else 1
        with connection.cursor() as cursor:
            # copy(): one C call under the GIL, while the operator may be adding a job.
            killed = sorted(play.killed_jobs.copy())
            cursor.execute(PICK_PROCS, {"shows": play.farm.show_ids, "killed": killed, "n": n, "ran": FRAME_SECONDS})
            proc_ids = [row[0] for row in cursor.fetchall()]
        if not proc_ids:
            play.stop.wait(0.05)
            continue
        with play.gate.operation(), transient(play, "release"):
            release_some(play, proc_ids=proc_ids)


def release_some(play: RedisPlay, *, proc_ids: list[str]) -> None:
    if play.plan.take("pg-rollback"):
        release_rolled_back(play, proc_ids=proc_ids)
        return
    if play.publish_drop is not None and play.plan.take("publish-drop"):
        play.publish_drop.arm()
    if play.web is not None and play.plan.take("http-release"):
        # Cuebot's call over HTTP, served by another process: its release is this service's all the same.
        outcomes = play.web.release(proc_ids)
        play.stats.count("faults", "http-release")
        play.stats.count("release_calls", "http batch" if len(proc_ids) > 1 else "http single")
        play.stats.add(releases=sum(outcomes), release_misses=len(outcomes) - sum(outcomes))
        return
    released = release_maybe_stalled(play, proc_ids=proc_ids)
    play.stats.count("release_calls", "batch" if len(proc_ids) > 1 else "single")
    found = sum(1 for r in released if r is not None)
    play.stats.add(releases=found, release_misses=len(released) - found)
    # The gate held every operation while the last reseed ran: one that passed it after is
    # wholly after the reseed.
    if play.last_reseed_done_at is not None:
        play.stats.add(releases_after_last_reseed=scheduler_procs(released))


def release_rolled_back(play: RedisPlay, *, proc_ids: list[str]) -> None:
    """pg-rollback: the release's transaction rolled back after its DELETE."""
    try:
        with transaction.atomic():
            rolled_back = release(proc_ids)
            raise InjectedRollback
    except InjectedRollback:
        play.stats.count("faults", "pg-rollback")
    if time.monotonic() < play.last_reseed_at and not scheduler_procs(rolled_back):
        # Cuebot-managed procs only: their rows rolled back, and nothing was registered to
        # publish, so the Redis side went untested. Again at the next release.
        play.plan.rearm("pg-rollback")


def release_maybe_stalled(play: RedisPlay, *, proc_ids: list[str]) -> list:
    # Not once the run's last reseed is done: nothing after it would take a stalled release's
    # proc off Redis, and the final check would find it high.
    if play.stalls is None or play.last_reseed_done_at is not None or not play.plan.take("release-stall"):
        return release(proc_ids)
    with play.stalls.stalling() as held:
        released = release(proc_ids)
    if not held:  # no scheduler-managed proc released among them: no publish to hold
        play.plan.rearm("release-stall")
    return released


def scheduler_procs(released: list) -> int:
    """How many of a release call's procs were scheduler-managed ones: published to Redis."""
    return sum(1 for r in released if r is not None and r.branch is Branch.SCHEDULER)


def release(proc_ids: list[str]) -> list:
    """Cuebot's two release entry points: one proc, or a batch in one transaction."""
    if len(proc_ids) == 1:
        return [unbook_proc(proc_id=proc_ids[0])]
    return unbook_procs(proc_ids=proc_ids)
