"""The show flags (`show:*` cache keys) held in the process, invalidated by Redis itself.

A release needs its show's flag and settling mark; asking the cache Redis each time was a
network round trip per release. This keeps what it read in the process, and Redis's
server-assisted client-side caching tells it when to drop it: one connection per process
runs `CLIENT TRACKING ON BCAST PREFIX <the cache's show: prefix> REDIRECT <itself>` and
subscribes to `__redis__:invalidate`, so every write, delete, expiry or flush of such a key,
by any process, is pushed to it. Before every read the pending pushes are taken off that
socket without waiting (a poll, no round trip), so a change that Redis has acknowledged to
its writer is seen by the next read here.

Safe reads when that channel is lost: nothing is served from the process while the
connection is down or broken (the read goes to the cache Redis, as without this module,
and the next read tries to reconnect), and a value is never kept longer than
SHOW_FLAG_CACHE_SECONDS (the key's own expiry reaches here as a push too, this only bounds
a channel that died silently). A value read from Redis is kept only if the channel was up
before the read and no push for its key arrived by the time it is stored.
"""

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

import redis
from django.conf import settings
from django.core.cache import cache

from infra.redis_factory import connection_options

logger = logging.getLogger(__name__)

_MISSING = object()
RECONNECT_SECONDS = 1.0
INVALIDATE_CHANNEL = b"__redis__:invalidate"


class TrackedKeys:
    """Values of the cache keys under one prefix, kept until Redis says they changed."""

    def __init__(self, *, url: str, prefix: str, ttl_seconds: float) -> None:
        self.url, self.prefix, self.ttl_seconds = url, prefix, ttl_seconds
        self._lock = threading.Lock()
        self._values: dict[str, tuple[object, float]] = {}
        self._conn: redis.Connection | None = None
        self._pid = os.getpid()
        self._next_attempt = 0.0
        self.client_id: int | None = None

    def get_many(self, keys: Sequence[str], read: Callable[[list[str]], dict]) -> dict:
        """`keys` (unprefixed cache keys) -> value, absent keys left out; `read` fetches the rest."""
        with self._lock:
            tracking = self._drain()
            channel = self._conn
            now = time.monotonic()
            found, missing = {}, []
            for key in keys:
                value, expires = self._values.get(key, (_MISSING, 0.0)) if tracking else (_MISSING, 0.0)
                if value is _MISSING or expires <= now:
                    missing.append(key)
                elif value is not None:
                    found[key] = value
        if not missing:
            return found
        fetched = read(missing)
        with self._lock:
            # Stored only if the channel that was up before the read still is (a channel
            # opened after it would not have seen a write made in between) and nothing for
            # these keys arrived meanwhile.
            if tracking and self._drain(dropping=missing) and self._conn is channel:
                expires = time.monotonic() + self.ttl_seconds
                for key in missing:
                    self._values[key] = (fetched.get(key), expires)
        return found | fetched

    def _drain(self, dropping: Sequence[str] = ()) -> bool:
        """Apply every push waiting on the tracking connection; False if tracking is not up,
        or if one of the `dropping` keys was invalidated."""
        if self._pid != os.getpid():  # a forked child must not read its parent's socket
            self._conn, self._values, self._pid = None, {}, os.getpid()
        if self._conn is None and not self._connect():
            return False
        dropped = False
        try:
            # can_read, not a poll of the socket alone: pushes already read into the
            # parser's buffer count too.
            # self._conn, re-read each time: a concurrent _close() may clear it, answered by the
            # AttributeError below (so the type checker's "may be None" is expected here).
            while self._conn.can_read(timeout=0):  # type: ignore[union-attr]
                message = self._conn.read_response()  # type: ignore[union-attr]
                if not isinstance(message, list) or len(message) != 3 or message[0] != b"message":
                    continue
                if message[1] != INVALIDATE_CHANNEL:
                    continue
                invalidated = message[2]
                if invalidated is None:  # FLUSHDB / FLUSHALL
                    self._values.clear()
                    dropped = dropped or bool(dropping)
                    continue
                for full_key in invalidated:
                    key = full_key.decode()[len(self.cache_prefix()) :]
                    self._values.pop(key, None)
                    dropped = dropped or key in dropping
        except (redis.RedisError, OSError, AttributeError) as error:
            logger.warning("show flag invalidation channel lost, reading the cache Redis until it is back: %s", error)
            self._close()
            return False
        return not dropped

    def cache_prefix(self) -> str:
        return cache.make_key("")

    def _connect(self) -> bool:
        if not self.url:  # no cache Redis (the Maestro era without one): every read asks the cache
            return False
        if time.monotonic() < self._next_attempt:  # a down Redis is not asked again on every read
            return False
        try:
            # RESP2: invalidations arrive as messages of a channel this connection subscribes to.
            conn = redis.Connection(**connection_options(url=self.url, timeout=2.0), protocol=2)
            conn.connect()
            conn.send_command("CLIENT", "ID")
            client_id = conn.read_response()
            conn.send_command(
                "CLIENT", "TRACKING", "ON", "REDIRECT", client_id, "BCAST", "PREFIX", self.cache_prefix() + self.prefix
            )
            conn.read_response()
            conn.send_command("SUBSCRIBE", INVALIDATE_CHANNEL)
            conn.read_response()
        except (redis.RedisError, OSError) as error:
            logger.debug("show flag tracking unavailable: %s", error)
            self._next_attempt = time.monotonic() + RECONNECT_SECONDS
            return False
        self._conn, self._values, self.client_id = conn, {}, client_id
        return True

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.disconnect()
        self._conn, self._values = None, {}


_trackers: dict[str, TrackedKeys] = {}
_trackers_lock = threading.Lock()


def show_keys() -> TrackedKeys:
    """The tracker of this process for the configured cache Redis (tests change it)."""
    url = settings.CACHE_REDIS_URL
    with _trackers_lock:
        tracker = _trackers.get(url)
        if tracker is None or tracker.ttl_seconds != settings.SHOW_FLAG_CACHE_SECONDS:
            tracker = _trackers[url] = TrackedKeys(
                url=url, prefix="show:", ttl_seconds=settings.SHOW_FLAG_CACHE_SECONDS
            )
        return tracker
