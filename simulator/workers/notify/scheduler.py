"""The NOTIFY-era scheduler model's thread: it LISTENs for releases and cap changes, and
recomputes its counters from SUM(proc) on its interval without applying a release twice.

The recompute must not apply a release twice: a release committed before its snapshot is
already out of SUM(proc). So the model takes its snapshot first, then commits a marker
notification, drops every release heard before the marker (each is in the snapshot, or
committed after it began and is dropped: the store stays high, never low), and applies what
comes after the marker, which committed after the snapshot began and so is still counted in it.
"""

import logging
import threading
import time
import uuid

import psycopg
from django.db import InterfaceError as DjangoInterfaceError
from django.db import OperationalError as DjangoOperationalError
from django.db import connection, connections

from accounting.notify.listen import decode, open_listener
from accounting.notify.payloads import LIMIT_CHANGE, RELEASE
from simulator.farm import SimFarm
from simulator.stopping import RunFailed
from simulator.workers.notify.model import Store
from simulator.workers.notify.model import snapshot as read_snapshot
from simulator.workers.notify.stats import NotifyStats

logger = logging.getLogger(__name__)

# A kill's marker, sent on acct_release in the transaction that marks the job FINISHED: every
# release heard after it was committed after the kill (PostgreSQL delivers in commit order).
KILL_MARKER = "sim-kill-"
RECOMPUTE_SECONDS = 1.0
# How long another thread waits on the scheduler model: its first LISTEN, a marker heard (one
# sent while no listener was connected is sent again), a recompute begun after the call. Past
# these it has stopped answering: RunFailed.
LISTEN_SECONDS = 10.0
SYNC_SECONDS = 15.0
RECOMPUTE_WAIT_SECONDS = 30.0


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
                snapshot = read_snapshot(cursor, self.farm.show_ids)
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
            # Its own session too: an error's traceback kept for the log can keep this object,
            # and the session with it, alive past the run.
            if self.listener is not None:
                self.listener.close()

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
