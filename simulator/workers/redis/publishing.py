"""The Redis era's faults in the release's publish, put in through the service's own seam
(accounting.release.eras.publishers_wrapped): publish-drop (one publish's Redis call fails) and
release-stall (a publish held until its in-flight entry has expired)."""

import random
import threading
from collections.abc import Callable
from contextlib import contextmanager

import redis

from accounting.live import keys
from accounting.release.publish import PreparedRelease, RedisReleasePublisher, ReleasePublisher
from infra.redis_factory import accounting_redis
from simulator.report import Stats


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
