"""The Redis era's simulation (OpenCue main, #2323 to #2472): the scheduler books against acct:*
hashes in the accounting Redis, Cuebot's releases take off them through this service, reseeds
rebuild them. Its workers are simulator.workers.redis's; its report, simulator.report's."""

import random
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
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
from infra.startup import redact
from simulator import pg_truth, reconcile
from simulator.era import Role, RunOptions, progress_counts
from simulator.farm import SimFarm, foreign_redis_keys, load_existing_farm, sim_show_ids
from simulator.faults import FAULT_KINDS, FaultPlan, parse_faults
from simulator.invariants import against_truth, farm_keys, negative_counters
from simulator.own_farm import build_sim_farm
from simulator.processes import PrivateRedis, private_redis, web_server
from simulator.report import Report, Stats
from simulator.workers.redis.booking import booker
from simulator.workers.redis.operating import operator
from simulator.workers.redis.play import RedisPlay
from simulator.workers.redis.publishing import PublishDrop, StalledPublishes, wrap_redis_publishers
from simulator.workers.redis.releasing import releaser
from simulator.workers.redis.reseeding import (
    inflight_keys_pending,
    negative_pg_rows,
    publish_expired,
    reconcile_once,
    reconciler,
    redis_open,
    scheduler_bound,
)
from simulator.workers.scheduler_view import FRAME_SECONDS, managed_show_ids

# Faults after which Redis may legitimately count high until a reseed: the run's exactness
# (nothing high before the final reseed) is judged only without them.
LEAVE_REDIS_HIGH = ("publish-drop", "crash-after-lua", "redis-restart", "redis-kill", "failover")
# The final check judges the releases made after the run's last reseed (a lost decrement shows
# there only): the run goes on past its end until this many procs of scheduler-managed shows
# were released after it.
RELEASES_TO_JUDGE = 10
CLAMPED = "cuebot_acct_release_clamped_total"


@dataclass(frozen=True)
class RedisEra:
    reconcile_interval: float = 1.0
    # Short, so a crashed booker's entry expires within the run; it must stay longer than
    # the slowest booking transaction (slow-commit holds one for up to 0.3 s).
    inflight_ttl_seconds: int = 3
    name: str = "redis"
    fault_kinds: tuple[str, ...] = FAULT_KINDS

    def parse_faults(self, text: str) -> tuple[str, ...]:
        return parse_faults(text)

    def wants_http_token(self, options: RunOptions) -> bool:
        return "http-release" in options.faults

    def refusal(self, options: RunOptions) -> str | None:
        faults = options.faults
        if "failover" in faults and sentinel_target(settings.ACCOUNTING_REDIS_URL) is None:
            return "the failover fault needs ACCOUNTING_REDIS_URL=redis+sentinel://host:port[,host:port...]/<master name>/<db>"
        if "failover" in faults and "redis-kill" in faults:
            return "the redis-kill fault runs a Redis of its own; the failover fault needs the Sentinel topology: choose one"
        # With redis-kill (part of "all") the run has a Redis of its own, which a redis-restart
        # flushes harmlessly; named without it, the flush would hit the configured Redis.
        if "redis-restart" not in faults or "redis-kill" in faults or options.allow_flush_foreign_keys:
            return None
        foreign = foreign_redis_keys(own_show_ids=[] if options.existing else sim_show_ids())
        if not foreign:
            return None
        return (
            f"refused: the redis-restart fault would flush {redact(settings.ACCOUNTING_REDIS_URL)}, which holds "
            f"{len(foreign)} key(s) of shows the simulator did not create (e.g. {', '.join(foreign[:3])}); "
            "add redis-kill (the run then uses a Redis of its own), point ACCOUNTING_REDIS_URL at a scratch "
            "Redis, or pass --allow-flush-foreign-keys"
        )

    @contextmanager
    def played(self, options: RunOptions) -> Iterator[RedisPlay]:
        if "http-release" in options.faults and not options.http_token:
            raise ValueError(
                "the http-release fault needs an API token allowed to release procs (RunOptions.http_token)"
            )
        with ExitStack() as stack:
            redis_server = stack.enter_context(own_redis()) if "redis-kill" in options.faults else None
            # The releases' rules follow who reseeds: with the scheduler-like reseeder (which leaves
            # out FINISHED jobs' procs) their releases are withheld, as a site running it would set.
            stack.enter_context(
                override_settings(
                    ACCOUNTING_INFLIGHT_TTL_SECONDS=self.inflight_ttl_seconds,
                    ACCOUNTING_SCHEDULER_RESEEDS=options.reseeder == "scheduler",
                )
            )
            web = (
                stack.enter_context(web_server(token=options.http_token)) if "http-release" in options.faults else None
            )
            play = self.new_play(options=options)
            play.redis_server, play.web = redis_server, web
            stack.enter_context(seams(play))
            yield play

    def new_play(self, *, options: RunOptions) -> RedisPlay:
        """The farm built (or loaded, --existing) and seeded in Redis, the fault plan drawn."""
        farm = load_existing_farm() if options.existing else build_sim_farm(
            shows=options.shows, hosts=options.hosts, jobs=options.jobs, rng=random.Random(options.seed)
        )  # fmt: skip
        seed_redis(farm=farm)
        plan = FaultPlan(kinds=options.faults, seconds=options.seconds, rng=random.Random(f"{options.seed}:faults"))
        return RedisPlay(
            options=options,
            farm=farm,
            stats=Stats(),
            plan=plan,
            reconcile_interval=self.reconcile_interval,
            inflight_ttl_seconds=self.inflight_ttl_seconds,
            clamped_before=REGISTRY.get_sample_value(CLAMPED) or 0,
        )

    def roles(self, play: RedisPlay) -> list[Role]:
        options = play.options
        return [
            Role("booker", booker, options.bookers),
            Role("releaser", releaser, options.releasers),
            Role("reconciler", reconciler),
            Role("operator", operator),
        ]

    def begin(self, play: RedisPlay) -> None:
        play.started = time.monotonic()
        # The last fifth of the run has no fault and no reseed: it ends on the exact count.
        play.last_reseed_at = play.started + play.options.seconds - self.tail(play)
        play.plan.start()

    def tail(self, play: RedisPlay) -> float:
        return 0.2 * play.options.seconds

    def stop_at(self, play: RedisPlay) -> float:
        """The run's seconds after its start, and at least the tail after the last reseed (it
        waits out the in-flight entries of stalled releases, up to a TTL, so it may finish late).
        Until RELEASES_TO_JUDGE procs of scheduler-managed shows were released after it, longer:
        a farm that has just refilled (every frame runs FRAME_SECONDS at least) can have nothing
        to release for longer than the tail, and then the final check judged nothing. Both waits
        are bounded: a last reseed that has not finished a cycle and a rebuild past the run's end
        (a fault left Redis failing) ends the run unjudged."""
        end = play.started + play.options.seconds
        done_at, tail = play.last_reseed_done_at, self.tail(play)
        if done_at is None:
            ttl = self.inflight_ttl_seconds
            return end + (ttl + 1) + ttl + self.reconcile_interval
        end = max(end, done_at + tail)
        if play.stats.releases_after_last_reseed < RELEASES_TO_JUDGE:
            end = max(end, done_at + tail + 3 * FRAME_SECONDS)
        return end

    def tick(self, play: RedisPlay) -> float:
        # Past the run's seconds the end moves with what the workers do: looked at often.
        return 1.0 if time.monotonic() - play.started < play.options.seconds else 0.05

    def counts(self, play: RedisPlay) -> dict[str, int]:
        return progress_counts(play.stats)

    def report(self, play: RedisPlay, *, seconds: float) -> Report:
        settle_inflight(ttl_seconds=self.inflight_ttl_seconds)
        publish_expired(play)  # what the workers' stop left stalled: nothing else runs now
        managed = managed_show_ids(farm=play.farm)
        low, high, judged = before_final_reseed(play, managed=managed)
        clamped = clamped_in_the_run(play)
        final_reconcile(stats=play.stats, ttl_seconds=self.inflight_ttl_seconds, reseeder=play.reseeder)
        return final_report(play, seconds=seconds, managed=managed, low=low, high=high, judged=judged, clamped=clamped)


@contextmanager
def own_redis() -> Iterator[PrivateRedis]:
    """redis-kill: the run's own server, so the kill never touches the configured Redis (nor
    another service's keys)."""
    with private_redis() as server, override_settings(ACCOUNTING_REDIS_URL=server.url):
        accounting_redis.cache_clear()
        try:
            yield server
        finally:
            accounting_redis.cache_clear()


def seams(play: RedisPlay):
    """What the run puts into the service's seams (publish-drop, release-stall), taken out when
    the run ends."""
    wraps: list[Callable[[ReleasePublisher], ReleasePublisher]] = []
    if "publish-drop" in play.options.faults:
        play.publish_drop = PublishDrop(rng=play.rng("publish-drop"), stats=play.stats)
        wraps.append(play.publish_drop.wrap)
    if "release-stall" in play.options.faults:
        play.stalls = StalledPublishes(stats=play.stats)
        wraps.append(play.stalls.wrap)
    return publishers_wrapped(wrap_redis_publishers(wraps=wraps)) if wraps else nullcontext()


def seed_redis(*, farm: SimFarm) -> None:
    """Rebuild an empty Redis, then seed each managed show of the farm as a switch would."""
    reconcile.bootstrap_if_empty()
    for show_id in managed_show_ids(farm=farm):
        reseed.seed_show(show_id=show_id)


def settle_inflight(*, ttl_seconds: int) -> None:
    """After the workers stopped: let in-flight entries of crashed or rolled-back operations
    expire (their holders are gone)."""
    deadline = time.monotonic() + ttl_seconds + 2
    while inflight_keys_pending() and time.monotonic() < deadline:
        time.sleep(0.1)


def before_final_reseed(play: RedisPlay, *, managed: list[str]) -> tuple[list, list, bool]:
    """Managed counters against SUM(proc) before the final reseed rewrites them: (low, high,
    whether high is judged: no fault of the run may leave Redis high, and releases were made
    after the last reseed)."""
    is_open = redis_open()
    final = (
        against_truth(show_ids=managed, bound=scheduler_bound(play.stats, reseeder=play.reseeder)) if is_open else None
    )
    judged = (
        play.reseeder == "project"
        and not set(play.options.faults) & set(LEAVE_REDIS_HIGH)
        and is_open
        and play.last_reseed_done_at is not None
        and play.stats.releases_after_last_reseed > 0
    )
    return (final.low, final.high, judged) if final is not None else ([], [], judged)


def clamped_in_the_run(play: RedisPlay) -> float:
    clamped = (REGISTRY.get_sample_value(CLAMPED) or 0) - play.clamped_before
    if play.web is not None:  # the web server's releases clamp in its own processes
        clamped += play.web.counter(CLAMPED)
    return clamped


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


def final_report(
    play: RedisPlay, *, seconds: float, managed: list[str], low: list, high: list, judged: bool, clamped: float
) -> Report:
    """After the final reseed: drift, negative counters and rows, Cuebot-managed shows' rows."""
    farm, options = play.farm, play.options
    drift = reconcile.drift_rows(show_ids=managed)
    negative = negative_counters(redis_keys=farm_keys(show_ids=farm.show_ids))
    for row in negative_pg_rows(farm=farm):
        play.stats.record("negative_pg_rows", row)
    pg_drift = [
        row for show_id in farm.show_ids if show_id not in managed for row in pg_truth.mismatches(show_id=show_id)
    ]
    connections.close_all()
    return Report(
        seed=options.seed,
        seconds=seconds,
        farm=farm_summary(options=options, farm=farm),
        stats=play.stats,
        drift_rows=drift,
        negative_counters=negative,
        faults_pending=play.plan.pending(),
        pg_drift_rows=pg_drift,
        low_before_final_reseed=low,
        high_before_final_reseed=high,
        exactness_judged=judged,
        releases_clamped=0 if "failover" in options.faults else int(clamped),
    )


def farm_summary(*, options: RunOptions, farm: SimFarm) -> dict:
    if options.existing:
        return {"existing": True, "shows": len(farm.show_ids)}
    wanted = ("shows", "hosts", "jobs", "bookers", "releasers", "existing", "reseeder")
    return {**{k: v for k, v in asdict(options).items() if k in wanted}, "faults": ",".join(options.faults) or "none"}
