"""The Redis era's reconciler: every interval a quiet sample, the empty-Redis bootstrap check,
the farm reseed (this project's, or one like the scheduler's own) and a second quiet sample;
four fifths into the run, the run's last reseed in a quiet moment. It also sends the stalled
publishes once their in-flight entries have expired (release-stall)."""

import time
from contextlib import nullcontext

import redis
from django.conf import settings
from django.db import close_old_connections

from accounting.live import keys
from accounting.reconcile import failover
from accounting.reconcile.reseed import open_to_booking
from infra.redis_factory import accounting_redis, replication_state
from simulator import pg_truth, reconcile
from simulator.farm import SimFarm
from simulator.invariants import AgainstTruth, SchedulerBound, against_truth
from simulator.report import Stats
from simulator.workers.redis.play import RedisPlay, worker
from simulator.workers.scheduler_view import managed_show_ids

RESEEDERS = ("project", "scheduler")
# With the scheduler's own reseed, a killed job's procs are released once one of its reseeds
# was written after the kill (or this long after they were due): the window the reseed's rule
# for FINISHED jobs is about, which its compare-and-swap, lost to the hot path most of the
# time on a busy farm, would otherwise leave to chance. A release published there is caught.
KILL_WAITS_FOR_RESEED_SECONDS = 2.0


@worker("reconciler")
def reconciler(play: RedisPlay, index: int) -> None:
    while not play.stop.wait(play.reconcile_interval):
        reconcile.run_due_settle_recomputes()
        for row in negative_pg_rows(farm=play.farm):
            play.stats.record("negative_pg_rows", row)
        try:
            if play.last_reseed_done_at is not None:
                sample_low(play, moment="after the last reseed")
            elif time.monotonic() >= play.last_reseed_at:
                last_reseed(play)
            else:
                reseed_cycle(play)
        except redis.exceptions.RedisError as error:
            # A cycle cut short by Redis (a redis-restart fault between a script load and
            # its call, say) is what a scheduler's loop meets too: it logs and tries again
            # at the next tick. Counted, not fatal.
            play.stats.count("reseed_cycles_failed", type(error).__name__)
        close_old_connections()


def last_reseed(play: RedisPlay) -> None:
    """The run's last reseed, in a quiet moment: nothing in flight, so it writes the truth
    exactly (under load a reseed may count an operation twice: high, safe). From here to the end
    every booking and release must land exactly, which the final check judges (a lost decrement
    shows there)."""
    with play.gate.quiet():
        sample_low_now(play, moment="before the last reseed")
        # Nothing is in flight now: a live entry is an orphan (a booking that crashed, a
        # release whose caller's transaction rolled back), which any reseed counts until it
        # expires. Let them expire first.
        deadline = time.monotonic() + settings.ACCOUNTING_INFLIGHT_TTL_SECONDS + 1
        while inflight_keys_pending() and time.monotonic() < deadline:
            time.sleep(0.1)  # expiry is Redis's clock: nothing to wait on but time
        publish_expired(play)  # stalled releases, their entries expired now
        reconcile_once(play.stats, reseeder=play.reseeder)
    play.last_reseed_done_at = time.monotonic()


def reseed_cycle(play: RedisPlay) -> None:
    """Before the reseed: what bookings and releases left (a reseed would rewrite the
    evidence); after it: what the reseed wrote."""
    sample_low(play, moment="before reseed")
    if play.stalls is not None and play.stalls.expiring_within(seconds=play.reconcile_interval + 0.5):
        # A stalled release's entry expires before the next cycle: no reseed until it is sent,
        # or the reseed's purge of expired entries would leave its publish nothing to apply,
        # and release.lua's rule untested.
        play.stats.add(reseeds_deferred_for_stalls=1)
        return
    # A killed job's procs wait for the scheduler's reseed (kill_awaits_reseed): that reseed
    # runs in a quiet moment, where its compare-and-swap wins.
    with play.gate.quiet() if kill_awaits_reseed(play) else nullcontext():
        reconcile_once(play.stats, reseeder=play.reseeder)
    sample_low(play, moment="after reseed")


def sample_low(play: RedisPlay, *, moment: str) -> None:
    with play.gate.quiet():
        sample_low_now(play, moment=moment)


def sample_low_now(play: RedisPlay, *, moment: str) -> None:
    """Send the stalled publishes now due, then record every counter below SUM(proc); the
    caller holds the gate quiet."""
    publish_expired(play)
    play.stats.add(quiet_samples=1)
    # The faults that empty or replace Redis wait: one landing between the check that Redis is
    # open and the read of its counters would have every key read 0, low.
    with play.redis_faults:
        found = low_counters(farm=play.farm, bound=scheduler_bound(play.stats, reseeder=play.reseeder))
    for low in found.low:
        play.stats.record("low_counters", (moment, *low))
    play.stats.add(low_within_scheduler_bound=len(found.tolerated))


def redis_open() -> bool:
    """False while the accounting Redis is closed by design: not rebuilt since it came up
    empty, or a promoted replica not rebuilt yet (booking.lua refuses it). It may read low then."""
    role, replid, (seeded, recorded) = replication_state(accounting_redis(), keys.SEEDED, keys.MASTER)
    return role == "master" and seeded is not None and (recorded is None or recorded.decode() == replid)


def low_counters(*, farm: SimFarm, bound: SchedulerBound | None) -> AgainstTruth:
    """The counters of the shows managed now (the owner of the moment) against what their procs
    book, on a Redis that is open for booking (acct:seeded: a Redis not rebuilt since it came
    up is closed, and reads low by design) and is the master recorded (a promoted replica can
    miss writes until its check closes and rebuilds it): `low` below SUM(proc), or below
    `bound` where the scheduler's own reseed runs. Call it with the gate quiet."""
    if not redis_open():
        return AgainstTruth(low=[], high=[], tolerated=[])
    return against_truth(show_ids=open_to_booking(show_ids=managed_show_ids(farm=farm)), bound=bound)


def scheduler_bound(stats: Stats, *, reseeder: str) -> SchedulerBound | None:
    """What the scheduler's own reseed may leave low (None where this project's reseeds run:
    nothing may read low)."""
    return SchedulerBound(ignored=stats.scheduler_ignored_now()) if reseeder == "scheduler" else None


def negative_pg_rows(*, farm: SimFarm) -> list[tuple]:
    """Committed PG accounting rows below zero, of the farm's Cuebot-managed shows (those
    whose PG tables are written by the releases, so they must be right at every moment)."""
    managed = set(managed_show_ids(farm=farm))
    return pg_truth.negative_rows(show_ids=[s for s in farm.show_ids if s not in managed])


def reconcile_once(stats: Stats, *, reseeder: str = "project") -> None:
    """Empty-Redis bootstrap when needed, then the booked reseed and the limit reseed: this
    project's (in-flight overlay, under the farm lock) or one like the scheduler's own
    recompute (no overlay), which counts the keys it wrote over live in-flight operations."""
    check = failover.check_master()  # what every task worker's watch does, once a second
    stats.add(failovers=int(check.failover), rebuilds_after_failover=int(check.rebuilt))
    if reconcile.bootstrap_if_empty():
        stats.add(bootstraps=1)
    if reseeder == "scheduler":
        outcome = reconcile.reseed_all_like_scheduler()
        written = outcome.written
        stats.add(reseed_keys_over_inflight=outcome.exposed_keys)
        stats.note_scheduler_write(keys_written=outcome.keys_written, ignored=outcome.ignored, complete=written)
    else:
        farm_reseed = reconcile.reseed_all()
        written = farm_reseed.written
        stats.add(bootstraps=int(farm_reseed.bootstrapped))
    if written:
        stats.add(reseed_cycles_run=1)
    else:
        stats.add(reseed_cycles_skipped=1)


def kill_awaits_reseed(play: RedisPlay) -> bool:
    """A job was killed since the scheduler-like reseed last wrote."""
    return play.reseeder == "scheduler" and play.last_kill_at > play.stats.scheduler_wrote_at


def publish_expired(play: RedisPlay) -> None:
    """Send the stalled publishes whose entries have expired, and record every counter one of
    them lowered. The caller holds the gate quiet and runs no reseed meanwhile, so between
    the two reads nothing but the publish writes those keys."""
    if play.stalls is None:
        return
    with play.redis_faults:
        for inner, prepared, entry_there in play.stalls.take_expired():
            play.stats.add(stalled_publishes=1, stalled_publishes_entry_expired=int(entry_there))
            before = counters(redis_keys=list(prepared.deltas))
            inner.publish(prepared=prepared)
            after = counters(redis_keys=list(prepared.deltas))
            for key in prepared.deltas:
                for name, was, now in zip(("int_cores", "int_gpus"), before[key], after[key]):
                    if now < was:
                        play.stats.record("expired_inflight_applied", (key, name, was, now))


def counters(*, redis_keys: list[str]) -> dict[str, tuple[int, int]]:
    client = accounting_redis()
    with client.pipeline(transaction=False) as pipe:
        for key in redis_keys:
            pipe.hmget(key, "int_cores", "int_gpus")
        return {key: (int(c or 0), int(g or 0)) for key, (c, g) in zip(redis_keys, pipe.execute())}


def inflight_keys_pending() -> int:
    """Entries of acct:inflight that have not yet expired, by Redis's clock."""
    client = accounting_redis()
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    return sum(1 for value in client.hvals(keys.INFLIGHT) if int(value.split(b"|", 1)[0]) > now_ms)
