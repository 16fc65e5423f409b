"""The Redis era's operator: show switches (flag-flip), limit changes, job kills and the
faults that empty or replace the accounting Redis (redis-restart, redis-kill, failover)."""

import random
import time

import redis
from django.conf import settings
from django.db import connection

from accounting.ownership.toggle import set_scheduler_managed
from accounting.release.unbook import unbook_proc
from infra.redis_factory import accounting_redis, sentinel_target
from shows.models import Show
from simulator import reconcile
from simulator.farm import finish_a_job
from simulator.workers.redis.play import RedisPlay, redis_errors_counted, transient, worker
from simulator.workers.redis.reseeding import KILL_WAITS_FOR_RESEED_SECONDS
from simulator.workers.scheduler_view import MANAGED_SHOWS_REFRESH_SECONDS, managed_show_ids

Kill = tuple[float, str, float]  # (when its procs go, job id, when it was killed)


@worker("operator")
def operator(play: RedisPlay, index: int) -> None:
    rng = play.rng("operator", index)
    kills: list[Kill] = []
    while not play.stop.wait(0.1):
        operate(play, rng=rng)
        kill(play, rng=rng, kills=kills)
        for due in [k for k in kills if kill_release_due(play, due=k[0], killed_at=k[2])]:
            kills.remove(due)
            with play.gate.operation(), transient(play, "job-kill release"):
                release_a_killed_job(play, job_id=due[1])
        replace_redis(play)
    # Cuebot releases every killed job's procs in the end: none is left running past the run.
    for _, job_id, _ in kills:
        with transient(play, "job-kill release"):
            release_a_killed_job(play, job_id=job_id)


def operate(play: RedisPlay, *, rng: random.Random) -> None:
    """The operator's own changes, when due: a show switched, a limit changed."""
    if play.plan.take("flag-flip"):
        with play.gate.operation(), transient(play, "flag-flip"), redis_errors_counted(play, "flag-flip"):
            flip_a_show(play, rng=rng)
    if play.plan.take("limit-change"):
        with play.gate.operation(), transient(play, "limit-change"):
            began = time.monotonic()
            change = reconcile.change_random_limit(rng=rng, show_ids=play.farm.show_ids)
            if change.lowered:
                play.stats.record("cap_lowerings", (change.key, began, time.monotonic()))
            play.stats.count("faults", "limit-change")


def kill(play: RedisPlay, *, rng: random.Random, kills: list[Kill]) -> None:
    if not play.plan.take("job-kill"):
        return
    with play.gate.operation(), transient(play, "job-kill"):
        job_id = kill_a_job(play, rng=rng)
    if job_id is None:
        play.plan.rearm("job-kill")
        return
    # Cuebot releases a killed job's procs as their hosts report back: later, with reseeds free
    # to run in between.
    play.last_kill_at = time.monotonic()
    kills.append((play.last_kill_at + rng.uniform(0.5, 2.5), job_id, play.last_kill_at))


def replace_redis(play: RedisPlay) -> None:
    """The faults that take the accounting Redis away: a failover, a kill, a restart."""
    if play.plan.take("failover"):
        with play.redis_faults, redis_errors_counted(play, "failover"):
            promote_a_replica()
            play.stats.count("faults", "failover")
    if play.plan.take("redis-kill"):
        with play.redis_faults:
            play.redis_server.restart()
        play.stats.count("faults", "redis-kill")
    if play.plan.take("redis-restart"):
        # A restarted Redis without persistence: no keys, no scripts.
        client = accounting_redis()
        with play.redis_faults:
            client.flushdb()
            client.script_flush()
        play.stats.count("faults", "redis-restart")


def kill_release_due(play: RedisPlay, *, due: float, killed_at: float) -> bool:
    """Whether a killed job's procs go now: their time has come and, with the scheduler's own
    reseed, one of its reseeds was written after the kill (or they waited long enough)."""
    now = time.monotonic()
    if now < due:
        return False
    waiting = play.reseeder == "scheduler" and play.stats.scheduler_wrote_at < killed_at
    return not waiting or now >= due + KILL_WAITS_FOR_RESEED_SECONDS


def promote_a_replica() -> None:
    """Ask a sentinel of ACCOUNTING_REDIS_URL to fail the master over (a replica is promoted
    at once; writes the old master took after the replica's last sync are lost)."""
    target = sentinel_target(settings.ACCOUNTING_REDIS_URL)
    with redis.Redis(*target.sentinels[0], socket_timeout=2) as sentinel:
        sentinel.execute_command("SENTINEL", "FAILOVER", target.master_name)


def kill_a_job(play: RedisPlay, *, rng: random.Random) -> str | None:
    """What OpenCue does first when a job is killed: the job FINISHED (its name freed), its
    procs still running. None when no job with procs is left to kill.

    The first kill and every other one after it take a scheduler-managed show's job, whose procs
    a reseed must keep counting until they go; the others any show's (a Cuebot-managed one's
    rows are Cuebot's). Ids are fresh each run, so a choice among every show could miss the
    scheduler's side in a short run."""
    managed_only = play.stats.faults["job-kill"] % 2 == 0
    with connection.cursor() as cursor:
        job_id = finish_a_job(cursor=cursor, show_ids=play.farm.show_ids, rng=rng, managed_only=managed_only)
    if job_id is None:
        return None
    play.killed_jobs.add(job_id)
    play.stats.count("faults", "job-kill")
    return job_id


def release_a_killed_job(play: RedisPlay, *, job_id: str) -> None:
    """The killed job's procs go, one call each, as their frames stop."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pk_proc FROM proc WHERE pk_job = %s", [job_id])
        proc_ids = [row[0] for row in cursor.fetchall()]
    released = [unbook_proc(proc_id=proc_id) for proc_id in proc_ids]
    play.stats.add(
        releases=sum(1 for r in released if r is not None), release_misses=sum(1 for r in released if r is None)
    )


def flip_a_show(play: RedisPlay, *, rng: random.Random) -> None:
    """Switch a random show, but never the last scheduler-managed one away: a farm with no
    managed show gives the bookers nothing to do for the rest of the run."""
    managed = set(managed_show_ids(farm=play.farm))
    candidates = [s for s in play.farm.show_ids if s not in managed or len(managed) > 1]
    show = Show.objects.get(pk=rng.choice(candidates))
    began = time.monotonic()
    try:
        set_scheduler_managed(show=show, managed=not show.b_scheduler_managed)
    finally:
        # The bookers' view of the owners lags by up to MANAGED_SHOWS_REFRESH_SECONDS: a booking
        # begun that long after the switch (or a switch cut short by Redis) may still be the old owner's.
        play.stats.record("switches", (show.pk, began, time.monotonic() + MANAGED_SHOWS_REFRESH_SECONDS))
    play.stats.count("faults", "flag-flip")
