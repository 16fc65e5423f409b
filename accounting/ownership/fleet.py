"""The fleet register: every web and task process records itself in PostgreSQL.

The publish invariant ("if any show is scheduler-managed, every instance publishes
releases to Redis") is about the whole fleet, not the process that checks it (lesson
8). Each process upserts its own row every HEARTBEAT_SECONDS from a daemon thread; a
row not refreshed for STALE_AFTER belongs to a process that is gone, so it no longer
counts and the guardrail schedule deletes it.
"""

import logging
import os
import socket
import threading
from datetime import datetime, timedelta

from django.db import close_old_connections, connection
from django.utils import timezone

import infra
from accounting.models import Instance
from infra.era import era

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 30
STALE_AFTER = timedelta(minutes=2)


def record_instance(*, role: str, started_at: datetime, now: datetime | None = None) -> Instance:
    """Upsert this process's row with what it is right now (its publish setting included)."""
    instance, _ = Instance.objects.update_or_create(
        host=socket.gethostname(),
        pid=os.getpid(),
        role=role,
        defaults={
            "publishes_to_redis": era().keeps_redis,
            "publishes_notify": era().sends_notify,
            "version": infra.__version__,
            "started_at": started_at,
            "last_seen": now or timezone.now(),
        },
    )
    return instance


def live_instances(*, now: datetime | None = None) -> list[Instance]:
    cutoff = (now or timezone.now()) - STALE_AFTER
    return list(Instance.objects.filter(last_seen__gte=cutoff).order_by("role", "host", "pid"))


def delete_stale_instances(*, now: datetime | None = None) -> int:
    cutoff = (now or timezone.now()) - STALE_AFTER
    deleted, _ = Instance.objects.filter(last_seen__lt=cutoff).delete()
    return deleted


class Heartbeat:
    """Records the process at once (before start() returns), then every `interval` seconds until stopped."""

    def __init__(self, *, role: str, interval: float = HEARTBEAT_SECONDS):
        self.role = role
        self.interval = interval
        self.started_at = timezone.now()
        self.beats = 0
        self.beat_done = threading.Event()  # set after every beat, for whoever waits on one
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"acct-heartbeat-{role}", daemon=True)

    def start(self) -> "Heartbeat":
        self._beat()  # registered before the process serves anything
        self._thread.start()
        return self

    def stop(self, *, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _beat(self) -> None:
        try:
            record_instance(role=self.role, started_at=self.started_at)
        except Exception:
            # A database blip must not kill the thread; the next beat tries again.
            logger.warning("instance heartbeat (%s) failed", self.role, exc_info=True)
        self.beats += 1
        self.beat_done.set()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                close_old_connections()  # this thread's own connection, dropped if broken or too old
                self._beat()
        finally:
            connection.close()


_process_heartbeat: Heartbeat | None = None
_process_lock = threading.Lock()


def start_process_heartbeat(*, role: str) -> Heartbeat:
    """Start this process's heartbeat once; later calls return the running one."""
    global _process_heartbeat
    with _process_lock:
        if _process_heartbeat is None:
            _process_heartbeat = Heartbeat(role=role).start()
        return _process_heartbeat
