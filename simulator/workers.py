"""The threads of a run: bookers (the Rust scheduler), releasers (Cuebot), the reconciler,
and the operator. There is no fault thread: each worker injects the faults due at its own
injection point (faults.FaultPlan.take). Each has its own PostgreSQL connection (Django's are
per thread) and closes it when it ends; all share the process's accounting Redis pool.
"""

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import redis
from django.conf import settings
from django.db import (
    OperationalError,
    close_old_connections,
    connection,
    connections,
    transaction,
)

from accounting.live import booking, keys
from accounting.ownership.switching import SwitchRefused
from accounting.ownership.toggle import set_scheduler_managed
from accounting.reconcile import failover
from accounting.reconcile.reseed import open_to_booking
from accounting.release.publish import PreparedRelease, RedisReleasePublisher, ReleasePublisher
from accounting.release.types import Branch
from accounting.release.unbook import unbook_proc, unbook_procs
from infra.redis_factory import (
    accounting_redis,
    replication_state,
    sentinel_target,
)
from infra.transactions import TRANSIENT_SQLSTATES, sqlstate
from shows.models import Show
from simulator import pg_truth as pg_accounting
from simulator import reconcile
from simulator.farm import PROC_MEM_KB, LayerRef, SimFarm, finish_a_job
from simulator.farm_builder import PROC_CORES, insert_running_frame
from simulator.faults import FaultPlan
from simulator.invariants import AgainstTruth, SchedulerBound, against_truth, over_cap_after_booking
from simulator.processes import PrivateRedis, WebServer
from simulator.report import OverCap, Stats
from simulator.stopping import RunFailed

logger = logging.getLogger(__name__)

SLOW_COMMIT_SECONDS = (0.05, 0.3)
MANAGED_SHOWS_REFRESH_SECONDS = 0.2


class InjectedRollback(Exception):
    """Raised inside a release transaction to roll it back after the DELETE (pg-rollback)."""


class HostFull(Exception):
    """The chosen host lost its idle capacity to another booker: the INSERT is abandoned."""


# How long a worker may wait for a quiet sample to end, and a quiet sample for the operations
# under way to end: far past the longest of either (a last reseed waits out an in-flight TTL or
# two), so only a stuck thread reaches it.
GATE_SECONDS = 30.0


class Gate:
    """Lets the reconciler take a quiet sample: while it holds `quiet()`, no booking, release,
    flip or limit change is under way, so every operation that started has both halves
    done (or its holder crashed, which leaves Redis high), and Redis must read at least
    SUM(proc) for every managed key. Anything lower is really low. Neither side waits past
    GATE_SECONDS: RunFailed."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._active = 0
        self._quiet = False

    @contextmanager
    def operation(self):
        with self._changed:
            if not self._changed.wait_for(lambda: not self._quiet, timeout=GATE_SECONDS):
                raise RunFailed(f"a quiet sample held the workers for more than {GATE_SECONDS:g} s")
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                self._changed.notify_all()

    @contextmanager
    def quiet(self):
        with self._changed:
            self._quiet = True
            if not self._changed.wait_for(lambda: self._active == 0, timeout=GATE_SECONDS):
                self._quiet = False
                self._changed.notify_all()
                raise RunFailed(f"an operation of the workers did not end within {GATE_SECONDS:g} s")
        try:
            yield
        finally:
            with self._changed:
                self._quiet = False
                self._changed.notify_all()


@dataclass
class SimContext:
    farm: SimFarm
    stats: Stats
    plan: FaultPlan
    seed: int
    reconcile_interval: float
    stop: threading.Event = field(default_factory=threading.Event)
    publish_drop: "PublishDrop | None" = None
    stalls: "StalledPublishes | None" = None
    # Held by a fault that empties or replaces the accounting Redis (redis-restart, redis-kill,
    # failover) and by the stalled publishes' check, which reads counters before and after.
    redis_faults: threading.Lock = field(default_factory=threading.Lock)
    reseeder: str = "project"
    gate: Gate = field(default_factory=Gate)
    # Jobs the job-kill fault marked FINISHED: the scheduler books no more frames of them.
    killed_jobs: set[str] = field(default_factory=set)
    # The run's own accounting Redis (redis-kill) and web server (http-release), when started.
    redis_server: PrivateRedis | None = None
    web: WebServer | None = None
    # When the reconciler runs its last reseed (time.monotonic(); the runner sets it at the
    # start, four fifths into the run) and when it finished, None until it has (the runner
    # keeps the workers going after that: runner.workers_stop_at).
    last_reseed_at: float = float("inf")
    last_reseed_done_at: float | None = None
    # When the job-kill fault last killed a job (time.monotonic()).
    last_kill_at: float = float("-inf")

    def rng(self, role: str, index: int = 0) -> random.Random:
        return random.Random(f"{self.seed}:{role}:{index}")


def worker(name: str):
    """Run a worker body, count any unexpected exception, and close this thread's connections."""

    def decorate(body):
        def run(ctx: SimContext, index: int) -> None:
            try:
                body(ctx, index)
            except Exception as error:  # noqa: BLE001 - reported as a failed invariant, never silent
                logger.exception("simulator %s %d died", name, index)
                ctx.stats.count("errors", f"{name}: {type(error).__name__}: {error}")
            finally:
                connections.close_all()

        run.__name__ = name
        return run

    return decorate


OPEN_HOSTS = """
SELECT pk_host, pk_alloc, int_cores_idle, int_gpus_idle FROM host
 WHERE pk_host = ANY(%(hosts)s) AND int_cores_idle >= %(cores)s AND int_mem_idle >= %(mem)s
"""
CLAIM_HOST = """
UPDATE host SET int_cores_idle = int_cores_idle - %(cores)s, int_mem_idle = int_mem_idle - %(mem)s,
                int_gpus_idle = int_gpus_idle - %(gpus)s
 WHERE pk_host = %(host)s AND int_cores_idle >= %(cores)s AND int_mem_idle >= %(mem)s AND int_gpus_idle >= %(gpus)s
"""
INSERT_PROC = """
INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, pk_frame, int_cores_reserved, int_gpus_reserved,
                  int_mem_reserved, int_gpu_mem_reserved, b_local, b_unbooked, ts_booked, ts_ping)
VALUES (%(proc)s, %(host)s, %(job)s, %(show)s, %(layer)s, %(frame)s, %(cores)s, %(gpus)s, %(mem)s, 0, false, false, now(), now())
"""


def insert_booked_proc(*, cursor, layer: LayerRef, host_id: str, centicores: int, gpus: int) -> None:
    """What a booking writes in PostgreSQL, as the scheduler does: the host's idle resources
    claimed (HostFull if they are gone), a running frame and the proc."""
    cursor.execute(CLAIM_HOST, {"host": host_id, "cores": centicores, "mem": PROC_MEM_KB, "gpus": gpus})
    if cursor.rowcount != 1:
        raise HostFull(host_id)
    frame_id = str(uuid.uuid4())
    insert_running_frame(cursor=cursor, frame_id=frame_id, layer_id=layer.layer_id, host_id=host_id, cores=centicores)
    cursor.execute(
        INSERT_PROC,
        {
            "proc": str(uuid.uuid4()),
            "host": host_id,
            "job": layer.job_id,
            "show": layer.show_id,
            "layer": layer.layer_id,
            "frame": frame_id,
            "cores": centicores,
            "gpus": gpus,
            "mem": PROC_MEM_KB,
        },
    )


class HostView:
    """The scheduler's view of hosts with idle cores: refreshed every fraction of a second,
    so it lags, and a booking on a host that filled up meanwhile fails at the INSERT (the
    host claim) and takes the rollback path, as a real scheduler's would."""

    def __init__(self, farm: SimFarm) -> None:
        self.farm = farm
        self.hosts: list[tuple[str, str, int, int]] = []
        self.read_at = 0.0

    def pick(self, *, rng: random.Random, cores: int, gpus: int) -> tuple[str, str] | None:
        """(host id, allocation id) of a host that seemed to have `cores` and `gpus` idle."""
        if time.monotonic() - self.read_at > MANAGED_SHOWS_REFRESH_SECONDS:
            with connection.cursor() as cursor:
                cursor.execute(OPEN_HOSTS, {"hosts": self.farm.host_ids, "cores": min(PROC_CORES), "mem": PROC_MEM_KB})
                self.hosts = cursor.fetchall()
            self.read_at = time.monotonic()
        fitting = [h for h in self.hosts if h[2] >= cores and h[3] >= gpus]
        if not fitting:
            return None
        host_id, alloc_id, _, _ = rng.choice(fitting)
        return host_id, alloc_id


class ManagedShows:
    """The scheduler's view of which shows it owns, refreshed every fraction of a second."""

    def __init__(self, farm: SimFarm) -> None:
        self.farm = farm
        self.show_ids: list[str] = []
        self.read_at = 0.0

    def current(self) -> list[str]:
        if time.monotonic() - self.read_at > MANAGED_SHOWS_REFRESH_SECONDS:
            managed = set(
                Show.objects.filter(pk__in=self.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True)
            )
            self.show_ids = [s for s in self.farm.show_ids if s in managed and self.farm.layers_by_show.get(s)]
            self.read_at = time.monotonic()
        return self.show_ids


# A GPU layer's frame asks for one of these many GPUs, some beyond its layer's maximum.
FRAME_GPUS = (1, 2, 3)


def frame_size(*, rng: random.Random, layer: LayerRef) -> tuple[int, int]:
    """What a frame of `layer` asks for: centicores from PROC_CORES, GPUs when its layer
    takes any; drawn past the layer's per-frame limits too, which the scheduler refuses."""
    return rng.choice(PROC_CORES), rng.choice(FRAME_GPUS) if layer.gpus_min > 0 else 0


def layer_refusal(*, layer: LayerRef, cores: int, gpus: int) -> str | None:
    """The layer's per-frame limit a frame of this size exceeds ("layer cores", "layer gpus"),
    or None. The scheduler sizes frames itself: booking.lua reads no layer limit."""
    if 0 < layer.cores_max < cores:
        return "layer cores"
    if 0 < layer.gpus_max < gpus:
        return "layer gpus"
    return None


def refusal_label(*, result: booking.BookingResult) -> str:
    """A rejection named by the cap that refused it: "subscription burst", "folder gpus"... A
    subscription without a burst is closed to booking (a rebuild, a switch), not at its cap."""
    if result.table == "subscription":
        return "subscription burst" if result.limit else "subscription closed"
    return f"{result.table} {result.unit}" if result.unit else str(result.table)


@worker("booker")
def booker(ctx: SimContext, index: int) -> None:
    rng, managed, hosts = ctx.rng("booker", index), ManagedShows(ctx.farm), HostView(ctx.farm)
    while not ctx.stop.is_set():
        shows = managed.current()
        if not shows:
            ctx.stop.wait(0.05)
            continue
        layer = rng.choice(ctx.farm.layers_by_show[rng.choice(shows)])
        if layer.job_id in ctx.killed_jobs:
            continue
        cores, gpus = frame_size(rng=rng, layer=layer)
        refused = layer_refusal(layer=layer, cores=cores, gpus=gpus)
        if refused:
            ctx.stats.count("rejections", refused)
            continue
        host = hosts.pick(rng=rng, cores=cores, gpus=gpus)
        if host is None:
            ctx.stats.count("rejections", "host")
            continue
        with ctx.gate.operation():
            book_one(ctx, rng=rng, layer=layer, host=host, cores=cores, gpus=gpus)


def book_one(
    ctx: SimContext, *, rng: random.Random, layer: LayerRef, host: tuple[str, str], cores: int, gpus: int
) -> None:
    """One scheduler booking: script, INSERT (host claimed in the same transaction), settle."""
    host_id, alloc_id = host
    ids = dict(
        show_id=layer.show_id,
        alloc_id=alloc_id,
        folder_id=layer.folder_id,
        job_id=layer.job_id,
        layer_id=layer.layer_id,
        dept_id=layer.dept_id,
    )
    op_id = uuid.uuid4().hex
    result = None
    started = time.monotonic()
    # What the scheduler's reseed may have left low when this booking's script reads Redis:
    # its last write's, which another write may replace before the check below.
    ignored_before = ctx.stats.scheduler_ignored_now() if ctx.reseeder == "scheduler" else {}
    # No master right now (a failover): nothing booked, or, if the reply was lost after the
    # script ran, its in-flight entry expires and Redis stays high until a reseed.
    with redis_errors_counted(ctx, "book"):
        result = booking.book(**ids, cores=cores, gpus=gpus, op_id=op_id)
    if result is None:
        return
    if not result.ok:
        ctx.stats.count("rejections", refusal_label(result=result))
        return
    if ctx.plan.take("crash-after-lua"):
        # The booker dies here: no INSERT, no settle, no rollback. Its in-flight entry
        # expires and the next booked reseed brings Redis back down to SUM(proc).
        ctx.stats.count("faults", "crash-after-lua")
        return
    slow = ctx.plan.take("slow-commit")
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            insert_booked_proc(cursor=cursor, layer=layer, host_id=host_id, centicores=cores, gpus=gpus)
            if slow:
                # The straddle window (docs/design.md#lessons), held open: acct:seq already
                # moved, the proc is not yet visible to a reseed's SUM(proc).
                time.sleep(rng.uniform(*SLOW_COMMIT_SECONDS))
                ctx.stats.count("faults", "slow-commit")
    except Exception:  # noqa: BLE001 - any INSERT failure takes the rollback path
        with redis_errors_counted(ctx, "rollback"):
            booking.rollback(**ids, cores=cores, gpus=gpus, op_id=op_id)
        ctx.stats.add(rollbacks=1)
        return
    with redis_errors_counted(ctx, "settle"):  # unsettled: the entry expires, Redis high meanwhile
        booking.settle(op_id=op_id)
    ctx.stats.add(bookings=1)
    check = dict(
        show_id=layer.show_id,
        alloc_id=alloc_id,
        folder_id=layer.folder_id,
        job_id=layer.job_id,
        layer_id=layer.layer_id,
        gpus=gpus,
        started=started,
    )
    found = over_cap_after_booking(**check)
    if found and ctx.reseeder == "scheduler":
        found = beyond_scheduler_bound(ctx, found=found, check=check, ignored_before=ignored_before)
    for violation in found:
        ctx.stats.record("over_cap", violation)


def beyond_scheduler_bound(
    ctx: SimContext, *, found: list[OverCap], check: dict, ignored_before: dict[str, tuple[int, int]]
) -> list[OverCap]:
    """Of a booking's caps passed (`found`), those it passed by more than the scheduler's own
    reseed lets a key read low: a key that reads low by X admits bookings up to X past its cap
    in SUM(proc). The FINISHED jobs' procs that reseed leaves out are left out of the sums
    (over_cap_after_booking's finished_jobs), and the in-flight amounts its last write of the
    key ignored, as of the booking's start or of now, are taken off. The others are counted,
    not violations."""
    ignored_now = ctx.stats.scheduler_ignored_now()

    def slack(v: OverCap) -> int:  # a layer's limits are per frame: no counter of theirs reads low
        if v.table == "layer":
            return 0
        return max(ignored.get(v.key, (0, 0))[v.unit == "gpus"] for ignored in (ignored_before, ignored_now))

    beyond = [v for v in over_cap_after_booking(**check, finished_jobs=False) if v.booked - slack(v) > v.cap]
    ctx.stats.add(over_cap_within_scheduler_bound=len(found) - len(beyond))
    return beyond


# Frames that finish release their procs. A killed job's frames do not finish: its procs go
# through the kill's own release (release_a_killed_job), later, as in OpenCue; released here at
# random, they were often gone before a reseed could run between the kill and their release.
# A frame runs FRAME_SECONDS at least: released at once, procs went as fast as they came and
# the farm never filled up to its caps.
FRAME_SECONDS = 1.0
PICK_PROCS = """
SELECT pk_proc FROM proc WHERE pk_show = ANY(%(shows)s) AND pk_job <> ALL(%(killed)s::text[])
   AND ts_booked <= now() - make_interval(secs => %(ran)s) ORDER BY random() LIMIT %(n)s
"""


@worker("releaser")
def releaser(ctx: SimContext, index: int) -> None:
    rng = ctx.rng("releaser", index)
    while not ctx.stop.is_set():
        n = rng.randint(2, 20) if rng.random() < 0.2 else 1
        with connection.cursor() as cursor:
            # copy(): one C call under the GIL, while the fault thread may be adding a job.
            killed = sorted(ctx.killed_jobs.copy())
            cursor.execute(PICK_PROCS, {"shows": ctx.farm.show_ids, "killed": killed, "n": n, "ran": FRAME_SECONDS})
            proc_ids = [row[0] for row in cursor.fetchall()]
        if not proc_ids:
            ctx.stop.wait(0.05)
            continue
        with ctx.gate.operation(), transient(ctx, "release"):
            release_some(ctx, proc_ids=proc_ids)


def release_some(ctx: SimContext, *, proc_ids: list[str]) -> None:
    if ctx.plan.take("pg-rollback"):
        try:
            with transaction.atomic():
                rolled_back = release(proc_ids)
                raise InjectedRollback
        except InjectedRollback:
            ctx.stats.count("faults", "pg-rollback")
        if time.monotonic() < ctx.last_reseed_at and not scheduler_procs(rolled_back):
            # Cuebot-managed procs only: their rows rolled back, and nothing was registered to
            # publish, so the Redis side went untested. Again at the next release.
            ctx.plan.rearm("pg-rollback")
        return
    if ctx.publish_drop is not None and ctx.plan.take("publish-drop"):
        ctx.publish_drop.arm()
    if ctx.web is not None and ctx.plan.take("http-release"):
        # Cuebot's call over HTTP, served by another process: its release is this service's all the same.
        outcomes = ctx.web.release(proc_ids)
        ctx.stats.count("faults", "http-release")
        ctx.stats.count("release_calls", "http batch" if len(proc_ids) > 1 else "http single")
        ctx.stats.add(releases=sum(outcomes), release_misses=len(outcomes) - sum(outcomes))
        return
    # Not once the run's last reseed is done: nothing after it would take a stalled release's
    # proc off Redis, and the final check would find it high.
    if ctx.stalls is not None and ctx.last_reseed_done_at is None and ctx.plan.take("release-stall"):
        with ctx.stalls.stalling() as held:
            released = release(proc_ids)
        if not held:  # no scheduler-managed proc released among them: no publish to hold
            ctx.plan.rearm("release-stall")
    else:
        released = release(proc_ids)
    ctx.stats.count("release_calls", "batch" if len(proc_ids) > 1 else "single")
    found = sum(1 for r in released if r is not None)
    ctx.stats.add(releases=found, release_misses=len(released) - found)
    # The gate held every operation while the last reseed ran: one that passed it after is
    # wholly after the reseed.
    if ctx.last_reseed_done_at is not None:
        ctx.stats.add(releases_after_last_reseed=scheduler_procs(released))


def scheduler_procs(released: list) -> int:
    """How many of a release call's procs were scheduler-managed ones: published to Redis."""
    return sum(1 for r in released if r is not None and r.branch is Branch.SCHEDULER)


@contextmanager
def redis_errors_counted(ctx: SimContext, label: str):
    """A Redis call the scheduler makes fails (no master during a failover, no server while a
    killed one restarts; a switch to the scheduler refused because its keys could not be
    closed): counted, and the caller goes on, as a scheduler would; every such
    failure leaves Redis high. Only in a run with the failover or redis-kill fault: anywhere
    else a Redis error ends the worker (worker_errors)."""
    try:
        yield
    except (redis.exceptions.RedisError, SwitchRefused) as error:
        if not set(ctx.plan.kinds) & {"failover", "redis-kill"}:
            raise
        ctx.stats.count("redis_errors", f"{label}: {type(error).__name__}")


@contextmanager
def transient(ctx: SimContext, label: str):
    """Count a transaction PostgreSQL rolled back whole (the service's transient errors:
    deadlock, serialization failure) instead of ending the worker: the caller (Cuebot, the
    operator) sees the error and does it again later, as these loops will. Anything else
    still ends the worker."""
    try:
        yield
    except OperationalError as error:
        state = sqlstate(error)
        if state not in TRANSIENT_SQLSTATES:
            raise
        ctx.stats.count("transient_errors", f"{label} {state}")


def release(proc_ids: list[str]) -> list:
    """Cuebot's two release entry points: one proc, or a batch in one transaction."""
    if len(proc_ids) == 1:
        return [unbook_proc(proc_id=proc_ids[0])]
    return unbook_procs(proc_ids=proc_ids)


@worker("reconciler")
def reconciler(ctx: SimContext, index: int) -> None:
    while not ctx.stop.wait(ctx.reconcile_interval):
        reconcile.run_due_settle_recomputes()
        for row in negative_pg_rows(farm=ctx.farm):
            ctx.stats.record("negative_pg_rows", row)
        try:
            if ctx.last_reseed_done_at is not None:
                sample_low(ctx, moment="after the last reseed")
            elif time.monotonic() >= ctx.last_reseed_at:
                # The run's last reseed, in a quiet moment: nothing in flight, so it writes the
                # truth exactly (under load a reseed may count an operation twice: high, safe).
                # From here to the end every booking and release must land exactly, which
                # the final check judges (a lost decrement shows there).
                with ctx.gate.quiet():
                    sample_low_now(ctx, moment="before the last reseed")
                    # Nothing is in flight now: a live entry is an orphan (a booking that
                    # crashed, a release whose caller's transaction rolled back), which any
                    # reseed counts until it expires. Let them expire first.
                    deadline = time.monotonic() + settings.ACCOUNTING_INFLIGHT_TTL_SECONDS + 1
                    while inflight_keys_pending() and time.monotonic() < deadline:
                        time.sleep(0.1)  # expiry is Redis's clock: nothing to wait on but time
                    publish_expired(ctx)  # stalled releases, their entries expired now
                    reconcile_once(ctx.stats, reseeder=ctx.reseeder)
                ctx.last_reseed_done_at = time.monotonic()
            else:
                # Before the reseed: what bookings and releases left (a reseed would rewrite
                # the evidence); after it: what the reseed wrote.
                sample_low(ctx, moment="before reseed")
                if ctx.stalls is not None and ctx.stalls.expiring_within(seconds=ctx.reconcile_interval + 0.5):
                    # A stalled release's entry expires before the next cycle: no reseed until
                    # it is sent, or the reseed's purge of expired entries would leave its
                    # publish nothing to apply, and release.lua's rule untested.
                    ctx.stats.add(reseeds_deferred_for_stalls=1)
                else:
                    # A killed job's procs wait for the scheduler's reseed (kill_awaits_reseed):
                    # that reseed runs in a quiet moment, where its compare-and-swap wins.
                    with ctx.gate.quiet() if kill_awaits_reseed(ctx) else nullcontext():
                        reconcile_once(ctx.stats, reseeder=ctx.reseeder)
                    sample_low(ctx, moment="after reseed")
        except redis.exceptions.RedisError as error:
            # A cycle cut short by Redis (a redis-restart fault between a script load and
            # its call, say) is what a scheduler's loop meets too: it logs and tries again
            # at the next tick. Counted, not fatal.
            ctx.stats.count("reseed_cycles_failed", type(error).__name__)
        close_old_connections()


def sample_low(ctx: SimContext, *, moment: str) -> None:
    with ctx.gate.quiet():
        sample_low_now(ctx, moment=moment)


def sample_low_now(ctx: SimContext, *, moment: str) -> None:
    """Send the stalled publishes now due, then record every counter below SUM(proc); the
    caller holds the gate quiet."""
    publish_expired(ctx)
    ctx.stats.add(quiet_samples=1)
    found = low_counters(farm=ctx.farm, bound=scheduler_bound(ctx.stats, reseeder=ctx.reseeder))
    for low in found.low:
        ctx.stats.record("low_counters", (moment, *low))
    ctx.stats.add(low_within_scheduler_bound=len(found.tolerated))


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
    managed = list(Show.objects.filter(pk__in=farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True))
    return against_truth(show_ids=open_to_booking(show_ids=managed), bound=bound)


def scheduler_bound(stats: Stats, *, reseeder: str) -> SchedulerBound | None:
    """What the scheduler's own reseed may leave low (None where this project's reseeds run:
    nothing may read low)."""
    return SchedulerBound(ignored=stats.scheduler_ignored_now()) if reseeder == "scheduler" else None


def negative_pg_rows(*, farm: SimFarm) -> list[tuple]:
    """Committed PG accounting rows below zero, of the farm's Cuebot-managed shows (those
    whose PG tables are written by the releases, so they must be right at every moment)."""
    cuebot_shows = list(
        Show.objects.filter(pk__in=farm.show_ids, b_scheduler_managed=False).values_list("pk", flat=True)
    )
    return pg_accounting.negative_rows(show_ids=cuebot_shows)


RESEEDERS = ("project", "scheduler")


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


# With the scheduler's own reseed, a killed job's procs are released once one of its reseeds
# was written after the kill (or this long after they were due): the window the reseed's rule
# for FINISHED jobs is about, which its compare-and-swap, lost to the hot path most of the
# time on a busy farm, would otherwise leave to chance. A release published there is caught.
KILL_WAITS_FOR_RESEED_SECONDS = 2.0


def kill_awaits_reseed(ctx: SimContext) -> bool:
    """A job was killed since the scheduler-like reseed last wrote."""
    return ctx.reseeder == "scheduler" and ctx.last_kill_at > ctx.stats.scheduler_wrote_at


def kill_release_due(ctx: SimContext, *, due: float, killed_at: float) -> bool:
    """Whether a killed job's procs go now: their time has come and, with the scheduler's own
    reseed, one of its reseeds was written after the kill (or they waited long enough)."""
    now = time.monotonic()
    if now < due:
        return False
    waiting = ctx.reseeder == "scheduler" and ctx.stats.scheduler_wrote_at < killed_at
    return not waiting or now >= due + KILL_WAITS_FOR_RESEED_SECONDS


@worker("operator")
def operator(ctx: SimContext, index: int) -> None:
    rng = ctx.rng("operator", index)
    kills: list[tuple[float, str, float]] = []  # (when its procs go, job id, when it was killed)
    while not ctx.stop.wait(0.1):
        if ctx.plan.take("flag-flip"):
            with ctx.gate.operation(), transient(ctx, "flag-flip"), redis_errors_counted(ctx, "flag-flip"):
                flip_a_show(ctx, rng=rng)
        if ctx.plan.take("limit-change"):
            with ctx.gate.operation(), transient(ctx, "limit-change"):
                began = time.monotonic()
                change = reconcile.change_random_limit(rng=rng, show_ids=ctx.farm.show_ids)
                if change.lowered:
                    ctx.stats.record("cap_lowerings", (change.key, began, time.monotonic()))
                ctx.stats.count("faults", "limit-change")
        if ctx.plan.take("job-kill"):
            with ctx.gate.operation(), transient(ctx, "job-kill"):
                job_id = kill_a_job(ctx, rng=rng)
            if job_id is None:
                ctx.plan.rearm("job-kill")
            else:
                # Cuebot releases a killed job's procs as their hosts report back: later, with
                # reseeds free to run in between.
                ctx.last_kill_at = time.monotonic()
                kills.append((ctx.last_kill_at + rng.uniform(0.5, 2.5), job_id, ctx.last_kill_at))
        for kill in [k for k in kills if kill_release_due(ctx, due=k[0], killed_at=k[2])]:
            kills.remove(kill)
            with ctx.gate.operation(), transient(ctx, "job-kill release"):
                release_a_killed_job(ctx, job_id=kill[1])
        if ctx.plan.take("failover"):
            with ctx.redis_faults, redis_errors_counted(ctx, "failover"):
                promote_a_replica()
                ctx.stats.count("faults", "failover")
        if ctx.plan.take("redis-kill"):
            with ctx.redis_faults:
                ctx.redis_server.restart()
            ctx.stats.count("faults", "redis-kill")
        if ctx.plan.take("redis-restart"):
            # A restarted Redis without persistence: no keys, no scripts.
            client = accounting_redis()
            with ctx.redis_faults:
                client.flushdb()
                client.script_flush()
            ctx.stats.count("faults", "redis-restart")
    # Cuebot releases every killed job's procs in the end: none is left running past the run.
    for _, job_id, _ in kills:
        with transient(ctx, "job-kill release"):
            release_a_killed_job(ctx, job_id=job_id)


def promote_a_replica() -> None:
    """Ask a sentinel of ACCOUNTING_REDIS_URL to fail the master over (a replica is promoted
    at once; writes the old master took after the replica's last sync are lost)."""
    target = sentinel_target(settings.ACCOUNTING_REDIS_URL)
    with redis.Redis(*target.sentinels[0], socket_timeout=2) as sentinel:
        sentinel.execute_command("SENTINEL", "FAILOVER", target.master_name)


def kill_a_job(ctx: SimContext, *, rng: random.Random) -> str | None:
    """What OpenCue does first when a job is killed: the job FINISHED (its name freed), its
    procs still running. None when no job with procs is left to kill.

    The first kill and every other one after it take a scheduler-managed show's job, whose procs
    a reseed must keep counting until they go; the others any show's (a Cuebot-managed one's
    rows are Cuebot's). Ids are fresh each run, so a choice among every show could miss the
    scheduler's side in a short run."""
    managed_only = ctx.stats.faults["job-kill"] % 2 == 0
    with connection.cursor() as cursor:
        job_id = finish_a_job(cursor=cursor, show_ids=ctx.farm.show_ids, rng=rng, managed_only=managed_only)
    if job_id is None:
        return None
    ctx.killed_jobs.add(job_id)
    ctx.stats.count("faults", "job-kill")
    return job_id


def release_a_killed_job(ctx: SimContext, *, job_id: str) -> None:
    """The killed job's procs go, one call each, as their frames stop."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pk_proc FROM proc WHERE pk_job = %s", [job_id])
        proc_ids = [row[0] for row in cursor.fetchall()]
    released = [unbook_proc(proc_id=proc_id) for proc_id in proc_ids]
    ctx.stats.add(
        releases=sum(1 for r in released if r is not None), release_misses=sum(1 for r in released if r is None)
    )


def flip_a_show(ctx: SimContext, *, rng: random.Random) -> None:
    """Switch a random show, but never the last scheduler-managed one away: a farm with no
    managed show gives the bookers nothing to do for the rest of the run."""
    managed = set(Show.objects.filter(pk__in=ctx.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True))
    candidates = [s for s in ctx.farm.show_ids if s not in managed or len(managed) > 1]
    show = Show.objects.get(pk=rng.choice(candidates))
    began = time.monotonic()
    try:
        set_scheduler_managed(show=show, managed=not show.b_scheduler_managed)
    finally:
        # The bookers' view of the owners lags by up to MANAGED_SHOWS_REFRESH_SECONDS: a booking
        # begun that long after the switch (or a switch cut short by Redis) may still be the old owner's.
        ctx.stats.record("switches", (show.pk, began, time.monotonic() + MANAGED_SHOWS_REFRESH_SECONDS))
    ctx.stats.count("faults", "flag-flip")


class PublishDrop:
    """publish-drop: the next release publish's Redis call fails, once.

    Installed for the run through the service's own seam (accounting.release.eras.publishers_wrapped):
    when armed, the era's publish goes through the service's RedisReleasePublisher over a link
    that either fails before sending (the publish never reached Redis) or sends and then loses
    the reply (it ran, and must not be resent). What the publisher does about a failed call
    (breaker, metric, WARN) is the service's own, unchanged. Both leave the accounting correct
    or high, never low.
    """

    def __init__(self, *, rng: random.Random, stats: Stats) -> None:
        self.rng, self.stats = rng, stats
        self._armed = 0
        self._lock = threading.Lock()

    def arm(self) -> None:
        with self._lock:
            self._armed += 1

    def _consume(self) -> bool:
        with self._lock:
            if not self._armed:
                return False
            self._armed -= 1
            return True

    def wrap(self, publisher: ReleasePublisher) -> ReleasePublisher:
        """For publishers_wrapped (wrap_redis_publishers), around the Redis era's publisher."""
        return _DroppingPublisher(inner=publisher, drop=self)


class _DroppingPublisher:
    def __init__(self, *, inner: ReleasePublisher, drop: PublishDrop) -> None:
        self.inner, self.drop = inner, drop

    def prepare(self, *, releases):
        return self.inner.prepare(releases=releases)  # the fault is the publish's; release_prepare is untouched

    def publish(self, *, prepared):
        if not self.drop._consume():
            return self.inner.publish(prepared=prepared)
        self.drop.stats.count("faults", "publish-drop")
        reply_lost = self.drop.rng.random() < 0.5
        lossy = RedisReleasePublisher(client=lambda: _LossyLink(accounting_redis(), reply_lost=reply_lost))
        return lossy.publish(prepared=prepared)


class _LossyLink:
    """The accounting Redis as one failing call sees it: the script's EVALSHA times out, before
    it was sent or after it ran. SCRIPT LOAD (after a NOSCRIPT reply, which ran nothing) goes through."""

    def __init__(self, client: redis.Redis, *, reply_lost: bool) -> None:
        self.client, self.reply_lost = client, reply_lost

    def evalsha(self, *args) -> object:
        if self.reply_lost:
            self.client.evalsha(*args)
            raise redis.exceptions.TimeoutError("simulated: reply lost after the release script ran")
        raise redis.exceptions.TimeoutError("simulated: release publish never reached Redis")

    def script_load(self, source: str) -> str:
        return self.client.script_load(source)


class StalledPublishes:
    """release-stall: Cuebot stops (a long GC pause, a SIGSTOP) between a release's commit and
    its publish, for longer than the in-flight TTL: the publish lands after its entry expired.

    Installed through the service's seam like PublishDrop. A publish made while `stalling()`
    is held is not sent; the reconciler sends it in a quiet moment once its entry has expired
    (`publish_expired`), and reads the release's counters before and after. release.lua must
    change none of them: an expired entry may already be out of a reseed's write (one that
    does not purge expired entries, as the scheduler's own recompute, can have written SUM(proc)
    without the proc), and taking the proc off again would read low.
    """

    def __init__(self, *, stats: Stats) -> None:
        self.stats = stats
        self._local = threading.local()
        self._held: list[tuple[ReleasePublisher, PreparedRelease]] = []
        self._lock = threading.Lock()

    @contextmanager
    def stalling(self):
        """For a release call in this thread: its publish is held. Yields the list of the
        publishes held (one at most; none when the call released no scheduler-managed proc)."""
        held: list[PreparedRelease] = []
        self._local.held = held
        try:
            yield held
        finally:
            self._local.held = None

    def wrap(self, publisher: ReleasePublisher) -> ReleasePublisher:
        """For publishers_wrapped (wrap_redis_publishers), around the Redis era's publisher."""
        return _StallingPublisher(inner=publisher, stalls=self)

    def hold(self, *, inner: ReleasePublisher, prepared: PreparedRelease) -> bool:
        held = getattr(self._local, "held", None)
        # A publish with nothing to take off (its procs released meanwhile by another caller)
        # would test nothing: sent at once, and the fault is due again.
        if held is None or held or not prepared.deltas:
            return False
        held.append(prepared)
        with self._lock:
            self._held.append((inner, prepared))
        self.stats.count("faults", "release-stall")
        return True

    def take_expired(self) -> list[tuple[ReleasePublisher, PreparedRelease, bool]]:
        """The held publishes whose entry has expired by Redis's clock (or is gone: purged by a
        reseed, flushed by a restart), each with whether its expired entry is still there."""
        client = accounting_redis()
        seconds, micros = client.time()
        now_ms = seconds * 1000 + micros // 1000
        due, kept = [], []
        with self._lock:
            for inner, prepared in self._held:
                entry = client.hget(keys.INFLIGHT, prepared.op_id)
                if entry is not None and int(entry.split(b"|", 1)[0]) > now_ms:
                    kept.append((inner, prepared))
                else:
                    due.append((inner, prepared, entry is not None))
            self._held = kept
        return due

    def expiring_within(self, *, seconds: float) -> bool:
        """Whether a held publish's entry is live now and expires within `seconds` (Redis's clock)."""
        client = accounting_redis()
        redis_seconds, micros = client.time()
        now_ms = redis_seconds * 1000 + micros // 1000
        with self._lock:
            entries = [client.hget(keys.INFLIGHT, prepared.op_id) for _, prepared in self._held]
        expiries = [int(entry.split(b"|", 1)[0]) for entry in entries if entry is not None]
        return any(now_ms < expiry <= now_ms + seconds * 1000 for expiry in expiries)


class _StallingPublisher:
    def __init__(self, *, inner: ReleasePublisher, stalls: StalledPublishes) -> None:
        self.inner, self.stalls = inner, stalls

    def prepare(self, *, releases):
        return self.inner.prepare(releases=releases)

    def publish(self, *, prepared):
        if self.stalls.hold(inner=self.inner, prepared=prepared):
            return None
        return self.inner.publish(prepared=prepared)


def publish_expired(ctx: SimContext) -> None:
    """Send the stalled publishes whose entries have expired, and record every counter one of
    them lowered. The caller holds the gate quiet and runs no reseed meanwhile, so between
    the two reads nothing but the publish writes those keys."""
    if ctx.stalls is None:
        return
    with ctx.redis_faults:
        for inner, prepared, entry_there in ctx.stalls.take_expired():
            ctx.stats.add(stalled_publishes=1, stalled_publishes_entry_expired=int(entry_there))
            before = _counters(redis_keys=list(prepared.deltas))
            inner.publish(prepared=prepared)
            after = _counters(redis_keys=list(prepared.deltas))
            for key in prepared.deltas:
                for name, was, now in zip(("int_cores", "int_gpus"), before[key], after[key]):
                    if now < was:
                        ctx.stats.record("expired_inflight_applied", (key, name, was, now))


def _counters(*, redis_keys: list[str]) -> dict[str, tuple[int, int]]:
    client = accounting_redis()
    with client.pipeline(transaction=False) as pipe:
        for key in redis_keys:
            pipe.hmget(key, "int_cores", "int_gpus")
        return {key: (int(c or 0), int(g or 0)) for key, (c, g) in zip(redis_keys, pipe.execute())}


def wrap_redis_publishers(
    *, wraps: list[Callable[[ReleasePublisher], ReleasePublisher]]
) -> Callable[[ReleasePublisher], ReleasePublisher]:
    """For publishers_wrapped, which takes one wrapper: each of `wraps` in turn around the
    Redis era's publisher. An era that publishes nothing to Redis has nothing to drop or stall."""

    def wrap(publisher: ReleasePublisher) -> ReleasePublisher:
        if not isinstance(publisher, RedisReleasePublisher):
            return publisher
        for one in wraps:
            publisher = one(publisher)
        return publisher

    return wrap


def inflight_keys_pending() -> int:
    """Entries of acct:inflight that have not yet expired, by Redis's clock."""
    client = accounting_redis()
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    return sum(1 for value in client.hvals(keys.INFLIGHT) if int(value.split(b"|", 1)[0]) > now_ms)
