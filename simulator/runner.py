"""One simulation run: build or load the farm, seed Redis, run the workers for the given
time under the fault plan, stop them, reconcile once more and check the invariants.
"""

import random
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass

from django.conf import settings
from django.db import connections
from django.test.utils import override_settings
from prometheus_client import REGISTRY

from accounting.live.leases import LEASE_SECONDS
from accounting.reconcile import reseed
from accounting.release.eras import publishers_wrapped
from accounting.release.publish import ReleasePublisher
from infra.redis_factory import accounting_redis, sentinel_target
from shows.models import Show
from simulator import pg_truth as pg_accounting
from simulator import reconcile
from simulator.farm import SimFarm, build_sim_farm, load_existing_farm
from simulator.faults import FaultPlan
from simulator.invariants import against_truth, farm_keys, negative_counters
from simulator.processes import PrivateRedis, WebServer, private_redis, web_server
from simulator.report import Report, Stats
from simulator.stopping import Threads
from simulator.workers import (
    FRAME_SECONDS,
    PublishDrop,
    SimContext,
    StalledPublishes,
    booker,
    inflight_keys_pending,
    negative_pg_rows,
    operator,
    publish_expired,
    reconcile_once,
    reconciler,
    redis_open,
    releaser,
    scheduler_bound,
    wrap_redis_publishers,
)


@dataclass(frozen=True)
class SimConfig:
    shows: int = 4
    hosts: int = 20
    jobs: int = 40
    seconds: float = 60.0
    bookers: int = 4
    releasers: int = 2
    faults: tuple[str, ...] = ()
    seed: int = 1
    existing: bool = False
    reconcile_interval: float = 1.0
    # Short, so a crashed booker's entry expires within the run; it must stay longer than
    # the slowest booking transaction (slow-commit holds one for up to 0.3 s).
    inflight_ttl_seconds: int = 3
    # Who reseeds during the run: "project" (accounting.reconcile.reseed) or "scheduler" (the
    # reference design's reseed, no in-flight overlay; see docs/redis-protocol.md).
    reseeder: str = "project"
    # An API token allowed to release procs, for the http-release fault (the caller makes it:
    # tokens belong to the operator faces, which the simulation does not import).
    http_token: str | None = None


def seed_redis(*, farm: SimFarm) -> None:
    """Rebuild an empty Redis, then seed each managed show of the farm as a switch would."""
    reconcile.bootstrap_if_empty()
    for show_id in Show.objects.filter(pk__in=farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True):
        reseed.seed_show(show_id=show_id)


# Faults after which Redis may legitimately count high until a reseed: the run's exactness
# (nothing high before the final reseed) is judged only without them.
LEAVE_REDIS_HIGH = ("publish-drop", "crash-after-lua", "redis-restart", "redis-kill", "failover")


def settle_inflight(*, ttl_seconds: int) -> None:
    """After the workers stopped: let in-flight entries of crashed or rolled-back operations
    expire (their holders are gone)."""
    deadline = time.monotonic() + ttl_seconds + 2
    while inflight_keys_pending() and time.monotonic() < deadline:
        time.sleep(0.1)


def final_reconcile(*, stats: Stats, ttl_seconds: int, reseeder: str) -> None:
    """Reconcile until the booked cycle is written."""
    # No booking can land any more: every show switched back to Cuebot can be settled now.
    reconcile.run_due_settle_recomputes(all_pending=True)
    # A farm lock whose release a failover lost (sent to the demoted master) runs out within
    # one lease; a rebuild inside the cycle waits one in-flight TTL.
    give_up = time.monotonic() + LEASE_SECONDS + ttl_seconds + 5
    while time.monotonic() < give_up:
        before = stats.reseed_cycles_run
        reconcile_once(stats, reseeder=reseeder)
        if stats.reseed_cycles_run > before:
            return
        time.sleep(0.2)


# The final check judges the releases made after the run's last reseed (a lost decrement shows
# there only): the run goes on past its end until this many procs of scheduler-managed shows
# were released after it.
RELEASES_TO_JUDGE = 10


def workers_stop_at(ctx: SimContext, *, started: float, config: SimConfig, tail: float) -> float:
    """When the workers stop (time.monotonic()): the run's seconds after its start, and at least
    `tail` after the last reseed (it waits out the in-flight entries of stalled releases, up to
    a TTL, so it may finish late). Until RELEASES_TO_JUDGE procs of scheduler-managed shows were
    released after it, longer: a farm that has just refilled (every frame runs FRAME_SECONDS at
    least) can have nothing to release for longer than the tail, and then the final check judged
    nothing. Both waits are bounded: a last reseed that has not finished a cycle and a rebuild
    past the run's end (a fault left Redis failing) ends the run unjudged."""
    end = started + config.seconds
    done_at = ctx.last_reseed_done_at
    if done_at is None:
        ttl = config.inflight_ttl_seconds
        return end + (ttl + 1) + ttl + config.reconcile_interval
    end = max(end, done_at + tail)
    if ctx.stats.releases_after_last_reseed < RELEASES_TO_JUDGE:
        end = max(end, done_at + tail + 3 * FRAME_SECONDS)
    return end


def run_simulation(
    *, config: SimConfig, progress: Callable[[float, Stats], None] = lambda elapsed, stats: None
) -> Report:
    if "failover" in config.faults and sentinel_target(settings.ACCOUNTING_REDIS_URL) is None:
        raise ValueError(
            "the failover fault needs ACCOUNTING_REDIS_URL=redis+sentinel://host:port[,host:port...]/<master name>/<db>"
        )
    if "failover" in config.faults and "redis-kill" in config.faults:
        raise ValueError(
            "the redis-kill fault runs a Redis of its own; the failover fault needs the Sentinel topology: choose one"
        )
    if "http-release" in config.faults and not config.http_token:
        raise ValueError("the http-release fault needs an API token allowed to release procs (SimConfig.http_token)")
    with ExitStack() as processes:
        redis_server = None
        if "redis-kill" in config.faults:
            # Its own server, so the kill never touches the configured Redis (nor another service's keys).
            redis_server = processes.enter_context(private_redis())
            processes.enter_context(override_settings(ACCOUNTING_REDIS_URL=redis_server.url))
            accounting_redis.cache_clear()
            processes.callback(accounting_redis.cache_clear)
        # The releases' rules follow who reseeds: with the scheduler-like reseeder (which leaves
        # out FINISHED jobs' procs) their releases are withheld, as a site running it would set.
        processes.enter_context(
            override_settings(
                ACCOUNTING_INFLIGHT_TTL_SECONDS=config.inflight_ttl_seconds,
                ACCOUNTING_SCHEDULER_RESEEDS=config.reseeder == "scheduler",
            )
        )
        web = processes.enter_context(web_server(token=config.http_token)) if "http-release" in config.faults else None
        return _run(config=config, progress=progress, redis_server=redis_server, web=web)


def _run(
    *,
    config: SimConfig,
    progress: Callable[[float, Stats], None],
    redis_server: PrivateRedis | None,
    web: WebServer | None,
) -> Report:
    rng = random.Random(config.seed)
    stats = Stats()
    farm = (
        load_existing_farm()
        if config.existing
        else build_sim_farm(
            shows=config.shows,
            hosts=config.hosts,
            jobs=config.jobs,
            rng=rng,
        )
    )
    seed_redis(farm=farm)
    plan = FaultPlan(kinds=config.faults, seconds=config.seconds, rng=random.Random(f"{config.seed}:faults"))
    ctx = SimContext(
        farm=farm,
        stats=stats,
        plan=plan,
        seed=config.seed,
        reconcile_interval=config.reconcile_interval,
        reseeder=config.reseeder,
        redis_server=redis_server,
        web=web,
    )
    clamped_before = REGISTRY.get_sample_value("cuebot_acct_release_clamped_total") or 0
    seams = ExitStack()  # what the run puts into the service's seams, taken out when the workers stop
    wraps: list[Callable[[ReleasePublisher], ReleasePublisher]] = []
    if "publish-drop" in config.faults:
        ctx.publish_drop = PublishDrop(rng=ctx.rng("publish-drop"), stats=stats)
        wraps.append(ctx.publish_drop.wrap)
    if "release-stall" in config.faults:
        ctx.stalls = StalledPublishes(stats=stats)
        wraps.append(ctx.stalls.wrap)
    if wraps:
        seams.enter_context(publishers_wrapped(wrap_redis_publishers(wraps=wraps)))
    roles = [(booker, config.bookers), (releaser, config.releasers), (reconciler, 1), (operator, 1)]
    started = time.monotonic()
    # The last fifth of the run has no fault and no reseed: it ends on the exact count.
    tail = 0.2 * config.seconds
    ctx.last_reseed_at = started + config.seconds - tail
    with seams, Threads(stop=ctx.stop) as workers:  # the workers stopped before the seams close
        plan.start()
        for body, count in roles:
            for i in range(count):
                workers.start(body, ctx, i, name=f"sim-{body.__name__}-{i}")
        while (remaining := workers_stop_at(ctx, started=started, config=config, tail=tail) - time.monotonic()) > 0:
            elapsed = time.monotonic() - started
            progress(elapsed, stats)
            # Past the run's seconds the end moves with what the workers do: looked at often.
            if ctx.stop.wait(min(1.0 if elapsed < config.seconds else 0.05, remaining)):
                break
    seconds = time.monotonic() - started
    progress(seconds, stats)
    settle_inflight(ttl_seconds=config.inflight_ttl_seconds)
    publish_expired(ctx)  # what the workers' stop left stalled: nothing else runs now
    managed = list(Show.objects.filter(pk__in=farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True))
    final = (
        against_truth(show_ids=managed, bound=scheduler_bound(stats, reseeder=config.reseeder))
        if redis_open()
        else None
    )
    low, high = (final.low, final.high) if final is not None else ([], [])
    judged = (
        config.reseeder == "project"
        and not set(config.faults) & set(LEAVE_REDIS_HIGH)
        and redis_open()
        and ctx.last_reseed_done_at is not None
        and stats.releases_after_last_reseed > 0
    )
    clamped = (REGISTRY.get_sample_value("cuebot_acct_release_clamped_total") or 0) - clamped_before
    if web is not None:  # the web server's releases clamp in its own processes
        clamped += web.counter("cuebot_acct_release_clamped_total")
    final_reconcile(stats=stats, ttl_seconds=config.inflight_ttl_seconds, reseeder=config.reseeder)
    drift = reconcile.drift_rows(show_ids=managed)
    negative = negative_counters(redis_keys=farm_keys(show_ids=farm.show_ids))
    for row in negative_pg_rows(farm=farm):
        stats.record("negative_pg_rows", row)
    cuebot_managed = [s for s in farm.show_ids if s not in managed]
    pg_drift = [row for show_id in cuebot_managed for row in pg_accounting.mismatches(show_id=show_id)]
    connections.close_all()
    return Report(
        seed=config.seed,
        seconds=seconds,
        farm={
            **{
                k: v
                for k, v in asdict(config).items()
                if k in ("shows", "hosts", "jobs", "bookers", "releasers", "existing", "reseeder")
            },
            "faults": ",".join(config.faults) or "none",
        }
        if not config.existing
        else {"existing": True, "shows": len(farm.show_ids)},
        stats=stats,
        drift_rows=drift,
        negative_counters=negative,
        faults_pending=plan.pending(),
        pg_drift_rows=pg_drift,
        low_before_final_reseed=low,
        high_before_final_reseed=high,
        exactness_judged=judged,
        releases_clamped=0 if "failover" in config.faults else int(clamped),
    )
