"""`simulate_farm --era notify`: the NOTIFY era played end to end.

A model of the current OpenCue scheduler keeps its counters in memory: it books against them
(sub burst, folder and job caps, as booking.lua does), INSERTs the procs, hears releases and
cap changes on its own LISTEN connection, and recomputes from SUM(proc) on its interval
without erasing bookings its snapshot cannot see yet. Cuebot's side is this project's release
path and limit services with ACCOUNTING_NOTIFY_ENABLED (Redis off). Faults: the listener's
connection dropped (it reconnects; what was sent meanwhile is lost), every connection of the
database terminated as a PostgreSQL restart would, and releases whose transaction rolls back.

The recompute must not apply a release twice: a release committed before its snapshot is
already out of SUM(proc). So the model takes its snapshot first, then commits a marker
notification, drops every release heard before the marker (each is in the snapshot, or
committed after it began and is dropped: the store stays high, never low), and applies what
comes after the marker, which committed after the snapshot began and so is still counted in it.

Invariants, checked on quiet samples (every worker between two operations, every
notification heard up to a marker) and at the end: the store never below SUM(proc), GPUs as
well as cores; with no connection lost, every committed release heard exactly once and
nothing from a rolled-back one (cores heard == cores committed), and every cap change heard.
"""

import logging
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connection, connections, transaction

from accounting.limits.changes import set_folder_limits, set_job_limits, set_subscription_limits
from accounting.live.units import cores_from_centicores
from accounting.models import FolderResource, JobResource, Subscription
from accounting.notify.listen import decode, open_listener
from accounting.notify.payloads import LIMIT_CHANGE, RELEASE
from accounting.release.unbook import unbook_proc, unbook_procs
from shows.models import Show
from simulator.farm import LayerRef, SimFarm, finish_a_job
from simulator.invariants import over_cap_after_booking
from simulator.report import CAP_KINDS, OverCap
from simulator.stopping import RunFailed, Threads
from simulator.workers import (
    FRAME_SECONDS,
    PICK_PROCS,
    Gate,
    HostFull,
    HostView,
    frame_size,
    insert_booked_proc,
    layer_refusal,
)

logger = logging.getLogger(__name__)

NOTIFY_FAULTS = ("listener-drop", "pg-restart", "release-rollback", "job-kill")
# A kill's marker, sent on acct_release in the transaction that marks the job FINISHED: every
# release heard after it was committed after the kill (PostgreSQL delivers in commit order).
KILL_MARKER = "sim-kill-"
RECOMPUTE_SECONDS = 1.0
SAMPLE_SECONDS = 1.5
# How long another thread waits on the scheduler model: its first LISTEN, a marker heard (one
# sent while no listener was connected is sent again), a recompute begun after the call. Past
# these it has stopped answering: RunFailed.
LISTEN_SECONDS = 10.0
SYNC_SECONDS = 15.0
RECOMPUTE_WAIT_SECONDS = 30.0

# The scheduler's recompute: per key, procs of managed shows that are not local, whose job is
# not FINISHED (the upstream query's rule), each proc's cores truncated as a release sends them.
SNAPSHOT = """
SELECT 'sub', p.pk_show || ':' || h.pk_alloc, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN host h ON h.pk_host = p.pk_host JOIN job j ON j.pk_job = p.pk_job JOIN show s ON s.pk_show = p.pk_show
 WHERE s.b_scheduler_managed AND NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
 GROUP BY 1, 2
UNION ALL
SELECT 'folder', j.pk_folder, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN job j ON j.pk_job = p.pk_job JOIN show s ON s.pk_show = p.pk_show
 WHERE s.b_scheduler_managed AND NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
 GROUP BY 1, 2
UNION ALL
SELECT 'job', p.pk_job, SUM(p.int_cores_reserved / 100), SUM(p.int_gpus_reserved)
  FROM proc p JOIN job j ON j.pk_job = p.pk_job JOIN show s ON s.pk_show = p.pk_show
 WHERE s.b_scheduler_managed AND NOT p.b_local AND j.str_state <> 'FINISHED' AND p.pk_show = ANY(%(shows)s)
 GROUP BY 1, 2
"""


@dataclass
class NotifyStats:
    bookings: int = 0
    rejections: Counter = field(default_factory=Counter)
    releases: int = 0
    committed_cores: int = 0  # released cores of committed scheduler-managed releases
    committed_gpus: int = 0
    heard_cores: int = 0  # released cores heard on acct_release, applied or dropped by a recompute
    heard_gpus: int = 0
    dropped_by_recompute: int = 0
    markers_sent_again: int = 0  # sync markers sent while no listener was there, sent again
    cap_changes: int = 0
    recomputes: int = 0
    samples: int = 0
    faults: Counter = field(default_factory=Counter)
    transient_errors: Counter = field(default_factory=Counter)
    low: list[tuple] = field(default_factory=list)  # (key, field, store, truth)
    unparsable: int = 0
    # Bookings whose committed SUM(proc) exceeded a cap the model knew (simulator.invariants),
    # and those past a cap it had not heard yet.
    over_cap: list[OverCap] = field(default_factory=list)
    over_cap_excused: int = 0
    # Bookings past a cap only when the procs of FINISHED (killed) jobs still running count.
    over_cap_by_killed_jobs_procs: int = 0
    # Releases heard for a job after its kill's marker: (job, cores, gpus). The NOTIFY era sends
    # none for a FINISHED job (docs/notify.md): its procs are out of the recompute already.
    killed_job_releases: list[tuple] = field(default_factory=list)
    worker_errors: list[str] = field(default_factory=list)  # an unexpected error ended a worker
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: int) -> None:
        """For counts that several worker threads move: `+=` on an attribute is a read and a
        write, and two releasers interleaving there lose a release from the exactness check."""
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def count(self, counter: str, key: str) -> None:
        with self.lock:
            getattr(self, counter)[key] += 1


# The folder's and the job's caps the model checks, cores first, then GPUs (booking.lua's
# order), folder before job: (unit, index in a counter's [cores, GPUs]).
FOLDER_AND_JOB_CAPS = (("cores", 0), ("gpus", 1))


class Store:
    """The scheduler's counters (cores, GPUs) and caps, keyed ('sub', show:alloc), ('folder', id), ('job', id)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.booked: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        self.caps: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
        self.pending: dict[str, tuple[list[tuple[str, str]], int, int, int | None]] = {}
        self.epoch = 0
        self.cap_heard_at: dict[tuple[str, str], float] = {}  # when a key's caps last changed (time.monotonic())

    def try_book(self, *, keys: list[tuple[str, str]], cores: int, gpus: int) -> tuple[str | None, str | None]:
        """(operation id, None) when booked; (None, the cap that refused it, named as the Redis
        era's rejections are: "subscription burst", "folder gpus"...) otherwise."""
        sub, folder, job = keys
        with self.lock:
            burst = self.caps[sub].get("burst", 0)
            if burst <= 0 or self.booked[sub][0] + cores > burst:
                return None, "subscription burst" if burst > 0 else "subscription closed"
            for unit, index in FOLDER_AND_JOB_CAPS:
                amount = (cores, gpus)[index]
                for key in (folder, job):
                    cap = self.caps[key].get(f"max_{unit}", 0)
                    if amount > 0 and cap > 0 and self.booked[key][index] + amount > cap:
                        return None, f"{key[0]} {unit}"
            for key in keys:
                self.booked[key][0] += cores
                self.booked[key][1] += gpus
            op = uuid.uuid4().hex
            self.pending[op] = (keys, cores, gpus, None)
            return op, None

    def committed(self, op: str) -> None:
        with self.lock:
            keys, cores, gpus, _ = self.pending[op]
            self.pending[op] = (keys, cores, gpus, self.epoch)

    def rolled_back(self, op: str) -> None:
        with self.lock:
            keys, cores, gpus, _ = self.pending.pop(op)
            for key in keys:
                self.booked[key][0] -= cores
                self.booked[key][1] -= gpus

    def release(self, fields: dict) -> None:
        with self.lock:
            for key in (
                ("sub", f"{fields['show']}:{fields['alloc']}"),
                ("folder", fields["folder"]),
                ("job", fields["job"]),
            ):
                if key in self.booked:
                    self.booked[key][0] += fields["cores"]
                    self.booked[key][1] += fields["gpus"]

    def limit(self, fields: dict) -> None:
        with self.lock:
            if fields["vertex"] == "sub":
                key = ("sub", f"{fields['show']}:{fields['alloc']}")
                self.caps[key]["burst"] = fields["burst"]
            else:
                key = (fields["vertex"], fields["id"])
                for name in ("max_cores", "max_gpus"):
                    if name in fields:
                        self.caps[key][name] = fields[name]
            self.cap_heard_at[key] = time.monotonic()

    def knew_cap(self, *, key: tuple[str, str], unit: str, cap: int, since: float) -> bool:
        """Whether the model booked against `cap`: it holds that value for the key's cap in
        `unit` ("cores" or "gpus") and has heard no change of the key's caps since `since`."""
        name = "burst" if key[0] == "sub" else f"max_{unit}"
        with self.lock:
            return self.caps[key].get(name) == cap and self.cap_heard_at.get(key, float("-inf")) < since

    def begin_recompute(self) -> int:
        with self.lock:
            self.epoch += 1
            return self.epoch

    def overwrite(self, *, snapshot: dict[tuple[str, str], tuple[int, int]], epoch: int) -> None:
        """Counters = the snapshot plus the bookings it cannot contain (not committed, or
        committed after this recompute began); bookings it does contain are forgotten."""
        with self.lock:
            fresh: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
            for key in self.booked:
                fresh[key] = [0, 0]
            for key, (cores, gpus) in snapshot.items():
                fresh[key] = [cores, gpus]
            for op, (keys, cores, gpus, committed_in) in list(self.pending.items()):
                if committed_in is not None and committed_in < epoch:
                    del self.pending[op]
                    continue
                for key in keys:
                    fresh[key][0] += cores
                    fresh[key][1] += gpus
            self.booked = fresh

    def counters(self) -> dict[tuple[str, str], tuple[int, int]]:
        with self.lock:
            return {key: (c, g) for key, (c, g) in self.booked.items()}


def _snapshot(cursor, show_ids: list[str]) -> dict[tuple[str, str], tuple[int, int]]:
    cursor.execute(SNAPSHOT, {"shows": show_ids})
    return {(kind, key): (int(cores), int(gpus)) for kind, key, cores, gpus in cursor.fetchall()}


class Scheduler:
    """The LISTEN side and the recompute, on one thread, as the scheduler's event loop runs them.
    The other threads' waits on it (sync, recompute_now, listening) end at once if it dies, and
    at a deadline if it stops answering: RunFailed either way."""

    def __init__(self, *, farm: SimFarm, store: Store, stats: NotifyStats, stop: threading.Event) -> None:
        self.farm, self.store, self.stats, self.stop = farm, store, stats, stop
        self.listener = None
        self.synced = threading.Condition()
        self.sync_markers: dict[str, bool] = {}
        # How many times a listener has connected; moves only once its LISTEN is done (under synced).
        self.listens = 0
        self.lost_connection = False  # a notification may have been lost: exactness is not judged
        self.killed_heard: set[str] = set()  # jobs whose kill marker was heard
        self.recomputed = threading.Condition()
        self.next_recompute = time.monotonic() + RECOMPUTE_SECONDS
        # The store's epoch of the last recompute done, and of the one a recompute_now waits for,
        # which begins at once, not at the next interval (under recomputed).
        self.done_epoch = self.wanted_epoch = 0
        self.died: str | None = None  # why this thread ended before it was told to stop

    def _connect(self) -> None:
        while not self.stop.is_set():
            try:
                self.listener = open_listener()
            except psycopg.OperationalError:
                self.stop.wait(0.2)  # PostgreSQL restarting: reconnect, as the scheduler's listener does
                continue
            with self.synced:
                self.listens += 1
                self.synced.notify_all()
            return

    def listening(self, *, seconds: float = LISTEN_SECONDS) -> None:
        """From another thread: return once the first listener has connected."""
        with self.synced:
            self.synced.wait_for(lambda: self.listens > 0 or self.died is not None, timeout=seconds)
            listens = self.listens
        self.raise_if_died()
        if not listens:
            raise RunFailed(f"the scheduler model could not LISTEN within {seconds:g} s")

    def raise_if_died(self) -> None:
        if self.died is not None:
            raise RunFailed(f"the scheduler model's thread died: {self.died}")

    def _marker(self, marker: str | None = None) -> str:
        marker = marker or f"sim-marker-{uuid.uuid4().hex}"
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [RELEASE, marker])
        return marker

    def _handle(self, channel: str, payload: str, *, drop_releases: bool) -> None:
        if payload.startswith("sim-marker-"):
            with self.synced:
                if payload in self.sync_markers:
                    self.sync_markers[payload] = True
                    self.synced.notify_all()
            return
        if payload.startswith(KILL_MARKER):
            self.killed_heard.add(payload.removeprefix(KILL_MARKER))
            return
        heard = decode(channel=channel, payload=payload)
        if heard.problem:
            self.stats.unparsable += 1
            return
        if channel == LIMIT_CHANGE:
            self.store.limit(heard.fields)
            return
        self.stats.heard_cores -= heard.fields["cores"]
        self.stats.heard_gpus -= heard.fields["gpus"]
        if heard.fields["job"] in self.killed_heard:
            self.stats.killed_job_releases.append((heard.fields["job"], heard.fields["cores"], heard.fields["gpus"]))
        if drop_releases:
            self.stats.dropped_by_recompute += 1
        else:
            self.store.release(heard.fields)

    def _drain_until(self, marker: str, *, drop_releases: bool) -> bool:
        """Handle what arrives up to `marker` (dropping releases if asked) and whatever came
        in the same packet after it (applied). psycopg reads a packet's notifications at once
        and loses the rest of them if its generator is left mid-packet, so it is never left:
        stop_after ends it at a packet's end."""
        found, deadline = False, time.monotonic() + 10
        while not found and (remaining := deadline - time.monotonic()) > 0 and not self.stop.is_set():
            for n in self.listener.notifies(timeout=min(remaining, 0.2), stop_after=1):
                if n.payload == marker:
                    found = True
                else:
                    self._handle(n.channel, n.payload, drop_releases=drop_releases and not found)
        return found

    def _recompute(self) -> None:
        epoch = self.store.begin_recompute()
        with psycopg.connect(**_params()) as snap:
            snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with snap.cursor() as cursor:
                snapshot = _snapshot(cursor, self.farm.show_ids)
        marker = self._marker()
        if self._drain_until(marker, drop_releases=True):
            self.store.overwrite(snapshot=snapshot, epoch=epoch)
            with self.recomputed:
                self.stats.recomputes += 1
                self.done_epoch = epoch
                self.recomputed.notify_all()

    def recompute_now(self, *, seconds: float = RECOMPUTE_WAIT_SECONDS) -> None:
        """From another thread: return once a recompute that began after this call is done (one
        under way may have taken its snapshot before it)."""
        with self.recomputed:
            wanted = self.store.epoch + 1
            self.wanted_epoch = max(self.wanted_epoch, wanted)
            done = self.recomputed.wait_for(lambda: self.done_epoch >= wanted or self.died is not None, timeout=seconds)
        self.raise_if_died()
        if not done:
            raise RunFailed(f"the scheduler model did not recompute within {seconds:g} s")

    def sync(self, *, seconds: float = SYNC_SECONDS) -> None:
        """From another thread: return once everything committed so far has been heard.

        A notification reaches only the sessions listening when it commits: one sent while the
        listener was away (dropped, or ended by a restart) is lost, not late. So the marker is
        sent again each time a listener has connected since it was last sent (counted in
        markers_sent_again), and waited for only while the same listener stays."""
        marker = f"sim-marker-{uuid.uuid4().hex}"
        deadline = time.monotonic() + seconds
        with self.synced:
            self.sync_markers[marker] = False  # registered before it is sent, so it cannot be missed
        try:
            while True:
                with self.synced:
                    listens = self.listens  # read before sending: a listener connected after it resends
                self._marker(marker)
                with self.synced:
                    self.synced.wait_for(
                        lambda: self.sync_markers[marker] or self.listens != listens or self.died is not None,
                        timeout=max(0.0, deadline - time.monotonic()),
                    )
                    if self.sync_markers[marker]:
                        return
                    self.raise_if_died()
                    if self.listens == listens:
                        raise RunFailed(f"the scheduler model did not hear its marker within {seconds:g} s")
                self.stats.add(markers_sent_again=1)
        finally:
            with self.synced:
                del self.sync_markers[marker]

    def disconnect(self) -> None:
        self.lost_connection = True
        try:
            self.listener.close()
        except Exception:  # noqa: BLE001 - already gone
            pass

    def run(self) -> None:
        """The thread's body: on an unexpected error it records why it died and wakes every wait on it."""
        try:
            self._listen()
        except Exception as error:  # noqa: BLE001 - the run fails on it, saying why (RunFailed)
            logger.exception("the simulator's scheduler model died")
            self.died = f"{type(error).__name__}: {error}"
            for condition in (self.synced, self.recomputed):
                with condition:
                    condition.notify_all()
        finally:
            connections.close_all()

    def _listen(self) -> None:
        self._connect()
        while not self.stop.is_set():
            try:
                for n in self.listener.notifies(timeout=0.05):
                    self._handle(n.channel, n.payload, drop_releases=False)
                if time.monotonic() >= self.next_recompute or self.wanted_epoch > self.store.epoch:
                    self._recompute()
                    self.next_recompute = time.monotonic() + RECOMPUTE_SECONDS
            except (psycopg.OperationalError, psycopg.InterfaceError, DjangoOperationalError, DjangoInterfaceError):
                # A restart ended this thread's connections: the scheduler reconnects and carries on.
                self.lost_connection = True
                self.stats.transient_errors["listener"] += 1
                connections.close_all()
                if self.listener is None or self.listener.closed or self.listener.broken:
                    self._connect()


def _params() -> dict:
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return params


def load_caps(store: Store, farm: SimFarm) -> None:
    """The scheduler's limit reseed at start."""
    with store.lock:
        for sub in Subscription.objects.filter(show_id__in=farm.show_ids):
            store.caps[("sub", f"{sub.show_id}:{sub.alloc_id}")]["burst"] = cores_from_centicores(sub.int_burst)
        for fr in FolderResource.objects.filter(folder__show_id__in=farm.show_ids):
            store.caps[("folder", fr.folder_id)].update(
                max_cores=-1 if fr.int_max_cores < 0 else fr.int_max_cores // 100, max_gpus=fr.int_max_gpus
            )
        for jr in JobResource.objects.filter(job__show_id__in=farm.show_ids):
            store.caps[("job", jr.job_id)].update(
                max_cores=-1 if jr.int_max_cores < 0 else jr.int_max_cores // 100, max_gpus=jr.int_max_gpus
            )


@dataclass
class NotifyRun:
    farm: SimFarm
    store: Store
    stats: NotifyStats
    scheduler: Scheduler
    gate: Gate
    stop: threading.Event
    faults: tuple[str, ...]
    rng: random.Random
    caps_expected: dict[tuple[str, str], dict[str, int]] = field(default_factory=lambda: defaultdict(dict))
    # Jobs the job-kill fault marked FINISHED, and when each one's procs go (time.monotonic()).
    killed_jobs: set[str] = field(default_factory=set)
    kill_releases: list[tuple[float, str]] = field(default_factory=list)

    def managed_layers(self) -> list[LayerRef]:
        """The layers the scheduler books: its shows' (no show changes owner in this era's run).
        Booking a Cuebot-managed show's, it booked keys it neither counts nor hears about."""
        managed = Show.objects.filter(pk__in=self.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True)
        return [layer for show in managed for layer in self.farm.layers_by_show.get(show, [])]


def _work(run: NotifyRun, *, where: str, step: Callable[[], None], pause: float = 0.0) -> None:
    """Repeat `step` until the run stops, never inside a quiet sample. A lost connection (a
    restart ended it mid-step) is counted and replaced; any other error ends the worker and
    is a failed invariant (worker_errors), never silent."""
    try:
        while not run.stop.wait(pause):
            with run.gate.operation():
                try:
                    step()
                except (DjangoOperationalError, DjangoInterfaceError):
                    run.stats.count("transient_errors", where)
                    connections.close_all()  # a terminated connection is replaced on the next query
    except Exception as error:  # noqa: BLE001 - reported as worker_errors
        logger.exception("simulator %s died", where)
        with run.stats.lock:
            run.stats.worker_errors.append(f"{where}: {type(error).__name__}: {error}")
    finally:
        connections.close_all()


def booker(run: NotifyRun, seed: int) -> None:
    rng, hosts, layers = random.Random(seed), HostView(run.farm), run.managed_layers()
    _work(run, where="booker", step=lambda: _book_one(run, rng=rng, hosts=hosts, layer=rng.choice(layers)))


def _book_one(run: NotifyRun, *, rng: random.Random, hosts: HostView, layer: LayerRef) -> None:
    if layer.job_id in run.killed_jobs:
        return  # the scheduler books no more frames of a killed job
    centicores, gpus = frame_size(rng=rng, layer=layer)
    refused = layer_refusal(layer=layer, cores=centicores, gpus=gpus)
    if refused is not None:
        _refused(run, cap=refused)
        return
    host = hosts.pick(rng=rng, cores=centicores, gpus=gpus)
    if host is None:
        return
    host_id, alloc_id = host
    keys = [("sub", f"{layer.show_id}:{alloc_id}"), ("folder", layer.folder_id), ("job", layer.job_id)]
    started = time.monotonic()
    op, refused = run.store.try_book(keys=keys, cores=cores_from_centicores(centicores), gpus=gpus)
    if op is None:
        _refused(run, cap=str(refused))
        return
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            insert_booked_proc(cursor=cursor, layer=layer, host_id=host_id, centicores=centicores, gpus=gpus)
    except HostFull:
        run.store.rolled_back(op)  # the host filled up since the scheduler's view was read
        run.stats.count("rejections", "host full")
        return
    except Exception:
        # Not committed (or unknown, after a restart: then the store stays high until the recompute).
        run.store.rolled_back(op)
        raise
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
        _judge_over_cap(run, keys=keys, check=check, started=started)


def _judge_over_cap(run: NotifyRun, *, keys: list[tuple[str, str]], check: dict, started: float) -> None:
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


def _refused(run: NotifyRun, *, cap: str) -> None:
    run.stats.count("rejections", cap)
    run.stop.wait(0.002)  # a full farm: the scheduler waits for capacity rather than spinning


class _RolledBack(Exception):
    pass


def releaser(run: NotifyRun, seed: int) -> None:
    rng = random.Random(seed)
    _work(run, where="releaser", step=lambda: _release_some(run, rng=rng))


def _release_some(run: NotifyRun, *, rng: random.Random) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            PICK_PROCS,
            {
                "shows": run.farm.show_ids,
                "killed": sorted(run.killed_jobs),
                "n": rng.randint(1, 6),
                "ran": FRAME_SECONDS,
            },
        )
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return
    if "release-rollback" in run.faults and rng.random() < 0.1:
        try:
            with transaction.atomic():
                unbook_procs(proc_ids=ids)
                raise _RolledBack
        except _RolledBack:
            run.stats.count("faults", "release-rollback")
        return
    released = [unbook_proc(proc_id=ids[0])] if len(ids) == 1 else unbook_procs(proc_ids=ids)
    for r in released:
        if r is None:
            continue
        run.stats.add(releases=1)
        if r.branch.value == "scheduler" and not (r.job_finished or r.job_gone):
            run.stats.add(committed_cores=r.cores, committed_gpus=r.gpus)


def operator(run: NotifyRun, seed: int) -> None:
    """Cap changes through the services, the five caps the scheduler hears live."""
    rng = random.Random(seed)
    _work(run, where="operator", step=lambda: _change_a_cap(run, rng=rng), pause=0.3)


def _change_a_cap(run: NotifyRun, *, rng: random.Random) -> None:
    """A cap of a scheduler-managed show (Cuebot-managed shows' caps are not sent)."""
    shows = list(Show.objects.filter(pk__in=run.farm.show_ids, b_scheduler_managed=True).values_list("pk", flat=True))
    kind = rng.choice(["sub", "folder", "job"])
    if kind == "sub":
        sub = rng.choice(list(Subscription.objects.filter(show_id__in=shows)))
        burst = rng.randint(20, 400)
        set_subscription_limits(subscription=sub, burst=burst * 100)
        run.caps_expected[("sub", f"{sub.show_id}:{sub.alloc_id}")]["burst"] = burst
    elif kind == "folder":
        fr = rng.choice(list(FolderResource.objects.filter(folder__show_id__in=shows)))
        cores, gpus = rng.choice([-1, rng.randint(5, 200)]), rng.choice([-1, rng.randint(1, 8)])
        set_folder_limits(folder_resource=fr, max_cores=cores if cores < 0 else cores * 100, max_gpus=gpus)
        run.caps_expected[("folder", fr.folder_id)].update(max_cores=cores, max_gpus=gpus)
    else:
        jr = rng.choice(list(JobResource.objects.filter(job__show_id__in=shows, job__str_state="PENDING")))
        cores, gpus = rng.randint(2, 100), rng.randint(0, 4)
        set_job_limits(job_resource=jr, max_cores=cores * 100, max_gpus=gpus)
        run.caps_expected[("job", jr.job_id)].update(max_cores=cores, max_gpus=gpus)
    run.stats.cap_changes += 1


def parse_notify_faults(text: str) -> tuple[str, ...]:
    if text == "all":
        return NOTIFY_FAULTS
    if text == "none":
        return ()
    kinds = tuple(kind.strip() for kind in text.split(",") if kind.strip())
    unknown = [kind for kind in kinds if kind not in NOTIFY_FAULTS]
    if unknown:
        raise ValueError(f"unknown fault(s) for --era notify: {', '.join(unknown)}; one of {', '.join(NOTIFY_FAULTS)}")
    return kinds


def quiet_sample(run: NotifyRun) -> None:
    """Workers held between operations, every committed notification heard: the store may not
    read below SUM(proc) anywhere."""
    with run.gate.quiet():
        run.scheduler.sync()
        store = run.store.counters()
        with connection.cursor() as cursor:
            truth = _snapshot(cursor, run.farm.show_ids)
    run.stats.samples += 1
    for key, (cores, gpus) in truth.items():
        have = store.get(key, (0, 0))
        for name, mine, real in (("cores", have[0], cores), ("gpus", have[1], gpus)):
            if mine < real:
                run.stats.low.append((key, name, mine, real))


def kill_a_job(run: NotifyRun) -> None:
    """OpenCue's kill: the job FINISHED (its name freed), its procs released 0.5-2.5 s later,
    one call each. Made with the workers held, so a release that starts after it reads the
    job FINISHED and one before it has committed; the marker rides on the kill's transaction."""
    with run.gate.quiet(), transaction.atomic(), connection.cursor() as cursor:
        job_id = finish_a_job(cursor=cursor, show_ids=run.farm.show_ids, rng=run.rng, managed_only=True)
        if job_id is None:
            return
        cursor.execute("SELECT pg_notify(%s, %s)", [RELEASE, KILL_MARKER + job_id])
        run.killed_jobs.add(job_id)
    run.kill_releases.append((time.monotonic() + run.rng.uniform(0.5, 2.5), job_id))
    run.stats.count("faults", "job-kill")


def release_killed_jobs(run: NotifyRun) -> None:
    """The procs of the killed jobs whose time has come, one call each, as Cuebot releases them."""
    for due in [k for k in run.kill_releases if k[0] <= time.monotonic()]:
        run.kill_releases.remove(due)
        with run.gate.operation(), connection.cursor() as cursor:
            cursor.execute("SELECT pk_proc FROM proc WHERE pk_job = %s", [due[1]])
            released = [unbook_proc(proc_id=row[0]) for row in cursor.fetchall()]
        run.stats.add(releases=sum(1 for r in released if r is not None))


def inject(run: NotifyRun, kind: str) -> None:
    if kind == "job-kill":
        kill_a_job(run)
        return
    if kind == "listener-drop":
        run.scheduler.disconnect()
    elif kind == "pg-restart":
        run.scheduler.lost_connection = True
        with connection.cursor() as cursor:  # every other session of this database, as a restart ends them
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
    run.stats.count("faults", kind)


FAULT_PERIOD_SECONDS = {"listener-drop": 4.0, "pg-restart": 6.0, "job-kill": 2.0}


def run_notify_simulation(
    *, farm: SimFarm, seconds: float, bookers: int, releasers: int, faults: tuple[str, ...], seed: int
) -> dict:
    """Run the workers for `seconds` on `farm` (built by the caller) and return the report.
    The caller holds ACCOUNTING_NOTIFY_ENABLED on and ACCOUNTING_REDIS_ENABLED off."""
    stats, store, scheduler_stop = NotifyStats(), Store(), threading.Event()
    scheduler = Scheduler(farm=farm, store=store, stats=stats, stop=scheduler_stop)
    run = NotifyRun(
        farm=farm,
        store=store,
        stats=stats,
        scheduler=scheduler,
        gate=Gate(),
        stop=threading.Event(),
        faults=faults,
        rng=random.Random(seed),
    )
    load_caps(store, farm)
    # The model listens until the final checks are done; the workers stop before them.
    with Threads(stop=scheduler_stop) as model:
        model.start(scheduler.run, name="sim-scheduler")
        scheduler.listening()  # listening before anything is released
        scheduler.recompute_now()  # the first recompute seeds the counters
        with Threads(stop=run.stop) as workers:
            for i in range(bookers):
                workers.start(booker, run, seed * 100 + i, name=f"sim-booker-{i}")
            for i in range(releasers):
                workers.start(releaser, run, seed * 200 + i, name=f"sim-releaser-{i}")
            workers.start(operator, run, seed * 300, name="sim-operator")
            _play(run, seconds=seconds)
        # The kills whose procs were still to go: released now, before the final checks.
        run.kill_releases = [(0.0, job_id) for _, job_id in run.kill_releases]
        release_killed_jobs(run)
        quiet_sample(run)
        scheduler.recompute_now()
        final_store = store.counters()
        with connection.cursor() as cursor:
            truth = _snapshot(cursor, farm.show_ids)
    return _report(run, seconds=seconds, final_store=final_store, truth=truth)


def _play(run: NotifyRun, *, seconds: float) -> None:
    """The main thread's part while the workers run: the faults when due, the killed jobs'
    releases, the quiet samples; a scheduler model that died ends it at once."""
    started = time.monotonic()
    # Each selected kind fires at least once, in the first half of the run.
    due = {
        kind: started + run.rng.uniform(0.2, min(FAULT_PERIOD_SECONDS[kind], seconds / 2))
        for kind in run.faults
        if kind in FAULT_PERIOD_SECONDS
    }
    next_sample = started + SAMPLE_SECONDS
    while time.monotonic() - started < seconds:
        run.scheduler.raise_if_died()
        now = time.monotonic()
        for kind, when in due.items():
            if now >= when:
                inject(run, kind)
                due[kind] = now + FAULT_PERIOD_SECONDS[kind]
        release_killed_jobs(run)
        if now >= next_sample:
            quiet_sample(run)
            next_sample = time.monotonic() + SAMPLE_SECONDS
        run.stop.wait(0.05)


def _report(
    run: NotifyRun,
    *,
    seconds: float,
    final_store: dict[tuple[str, str], tuple[int, int]],
    truth: dict[tuple[str, str], tuple[int, int]],
) -> dict:
    stats, store, scheduler = run.stats, run.store, run.scheduler
    exact = scheduler.lost_connection is False
    caps_missing = (
        []
        if not exact
        else [
            (key, name, store.caps[key].get(name), value)
            for key, caps in run.caps_expected.items()
            for name, value in caps.items()
            if store.caps[key].get(name) != value
        ]
    )
    invariants = {
        "store_below_sum_proc": len(stats.low),
        "store_differs_after_final_recompute": sum(
            1 for key, value in truth.items() if final_store.get(key, (0, 0)) != value
        ),
        "releases_not_heard_exactly_once": 0
        if not exact
        else int((stats.heard_cores, stats.heard_gpus) != (stats.committed_cores, stats.committed_gpus)),
        "cap_changes_not_heard": len(caps_missing),
        "unparsable_payloads": stats.unparsable,
        "killed_job_releases_heard": len(stats.killed_job_releases),
        "over_cap": len(stats.over_cap),
        "worker_errors": len(stats.worker_errors),
    }
    return {
        "era": "notify",
        "seconds": seconds,
        "faults": dict(stats.faults),
        "bookings": stats.bookings,
        "rejections": dict(stats.rejections),
        "refused_at_cap": {kind: stats.rejections[kind] for kind in CAP_KINDS},
        "releases": stats.releases,
        "cap_changes": stats.cap_changes,
        "recomputes": stats.recomputes,
        "quiet_samples": stats.samples,
        "released_cores": {"committed": stats.committed_cores, "heard": stats.heard_cores},
        "released_gpus": {"committed": stats.committed_gpus, "heard": stats.heard_gpus},
        "releases_dropped_by_recompute": stats.dropped_by_recompute,
        "markers_sent_again": stats.markers_sent_again,
        "exactness_judged": exact,
        "transient_errors": dict(stats.transient_errors),
        "low_samples": [list(map(str, low)) for low in stats.low[:10]],
        "caps_missing": [list(map(str, c)) for c in caps_missing[:10]],
        "killed_job_releases": [list(map(str, r)) for r in stats.killed_job_releases[:10]],
        "over_cap_excused": stats.over_cap_excused,
        "over_cap_by_killed_jobs_procs": stats.over_cap_by_killed_jobs_procs,
        "over_cap_examples": [vars(v) for v in stats.over_cap[:10]],
        "worker_error_messages": stats.worker_errors[:10],
        "invariants": invariants,
        "ok": not any(invariants.values()),
    }
