"""Publishes committed releases of scheduler-managed procs to the Redis live view.

Two steps per release (or per batch, which is one operation):
- `prepare`, before the release transaction takes its first row lock: registers the
  amounts about to be released in the in-flight hash (release_prepare.lua), so a reseed
  that reads SUM(proc) after the DELETE commits still counts them until Redis is
  decremented. A reseed that reads before the DELETE counts them twice: high, safe.
- `publish`, in `transaction.on_commit`: one release.lua call that decrements the five
  keys per release actually made (deltas summed per key), settles the in-flight entry and
  bumps acct:seq. No PostgreSQL lock is held while either waits on Redis.

A Redis call that times out or cannot connect opens a breaker for this process for
ACCOUNTING_REDIS_BREAKER_SECONDS: until then releases skip Redis at once (counted as
`breaker` failures), so a stalled Redis costs one release at most one timeout per step,
and the others nothing; they leave Redis high, as any failure does.

Every failure leaves Redis counting high and is swallowed with a WARN and a metric: the
PG commit stands and the recompute heals Redis. Nothing is ever resent after a timeout or
a broken connection (the script may have run); only NOSCRIPT reloads (accounting.live.scripts).
A prepare that fails schedules no publish: without its entry a decrement could land
after a reseed already counted the proc gone, and push the key low.
"""

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, cast

import redis
from django.conf import settings

from accounting.live import keys
from accounting.live.scripts import script
from accounting.reconcile.empty import FARM_LOCK_KEY, rebuild_at_once
from accounting.release.types import KEY_IDS, Release
from infra.metrics import (
    RELEASE_CLAMPED,
    RELEASE_PUBLISH_FAILURES,
    RELEASE_PUBLISH_SECONDS,
    RELEASE_PUBLISH_STALE,
)
from infra.redis_factory import accounting_redis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedRelease:
    """A registered in-flight release, ready to publish after commit."""

    op_id: str
    # key -> (cores, gpus) to take off; cores already converted per proc.
    deltas: dict[str, tuple[int, int]]
    proc_ids: tuple[str, ...]
    show_ids: tuple[str, ...]


def release_keys(release: Release) -> tuple[str, ...]:
    """The hashes the release takes the proc off: the booking's five, or, when the proc's job
    row is gone, the three it can still name (its folder and point are unknown)."""
    if release.job_gone:
        return (
            keys.sub(show_id=release.show_id, alloc_id=release.alloc_id),
            keys.job(job_id=release.job_id),
            keys.layer(layer_id=release.layer_id),
        )
    # The job row is there (job_gone is folder_id None): its pk_folder and pk_dept are NOT NULL.
    assert release.folder_id is not None and release.dept_id is not None
    return keys.of_proc(
        show_id=release.show_id,
        alloc_id=release.alloc_id,
        folder_id=release.folder_id,
        job_id=release.job_id,
        layer_id=release.layer_id,
        dept_id=release.dept_id,
        point_show_id=release.point_show_id,
    )


def summed_deltas(releases: Sequence[Release]) -> dict[str, tuple[int, int]]:
    """Per key, the sum of each release's cores (converted per proc) and gpus."""
    # Procs of one layer name the same keys: sum per layer first, name the keys once per layer.
    per_layer: dict[tuple, list] = {}
    for release in releases:
        # a tuple: mypy types a named tuple's slice by a non-literal slice as one of its fields
        ids = cast(tuple, release[KEY_IDS])
        entry = per_layer.get(ids)
        if entry is None:
            per_layer[ids] = [release, release.cores, release.gpus]
        else:
            entry[1] += release.cores
            entry[2] += release.gpus
    totals: dict[str, tuple[int, int]] = {}
    for release, cores, gpus in per_layer.values():
        for key in release_keys(release):
            key_cores, key_gpus = totals.get(key, (0, 0))
            totals[key] = (key_cores + cores, key_gpus + gpus)
    return totals


class ReleasePublisher(Protocol):
    def prepare(self, *, releases: Sequence[Release]) -> PreparedRelease | None: ...

    def publish(self, *, prepared: PreparedRelease) -> int | None: ...


class NoopReleasePublisher:
    """The eras that keep no accounting Redis (keeps_redis false in infra.era.Era)."""

    def prepare(self, *, releases: Sequence[Release]) -> PreparedRelease | None:
        return None

    def publish(self, *, prepared: PreparedRelease) -> int | None:
        return None


class _Breaker:
    """Open for a while after a Redis call timed out or could not connect (this process only)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open_until = 0.0

    def is_open(self) -> bool:
        return time.monotonic() < self._open_until

    def trip(self) -> None:
        with self._lock:
            self._open_until = time.monotonic() + settings.ACCOUNTING_REDIS_BREAKER_SECONDS

    def close(self) -> None:
        self._open_until = 0.0


breaker = _Breaker()
_UNREACHABLE = (redis.TimeoutError, redis.ConnectionError, TimeoutError, ConnectionError)


def _bump() -> str:
    """Whether releases bump acct:seq: only for a reseeder that does not read acct:inflight
    (release_prepare.lua says why)."""
    return "1" if settings.ACCOUNTING_SCHEDULER_RESEEDS else "0"


def _ids(prepared: PreparedRelease) -> str:
    return f"procs={','.join(prepared.proc_ids)} shows={','.join(prepared.show_ids)}"


def _failed(*, stage: str, what: str, prepared: PreparedRelease, error: Exception) -> None:
    """A release's Redis step failed: counted and logged, never resent (the caller returns
    None and PostgreSQL's commit stands). A Redis that did not answer opens the breaker."""
    if isinstance(error, _UNREACHABLE):
        breaker.trip()
    RELEASE_PUBLISH_FAILURES.labels(stage=stage).inc()
    logger.warning(
        "%s, Redis left high until the recompute: %s (%s: %s)", what, _ids(prepared), type(error).__name__, error
    )


class RedisReleasePublisher:
    def __init__(self, *, client: Callable[[], redis.Redis] | None = None) -> None:
        # Where the scripts go: the accounting Redis, looked up at each call so a settings
        # change takes effect at once. Another client only where a test or the simulator
        # stands for the network between the publisher and Redis (its publish-drop fault),
        # so everything this class does about a failed call (breaker, metric, WARN) is run.
        self._client = client or accounting_redis

    def prepare(self, *, releases: Sequence[Release]) -> PreparedRelease | None:
        prepared = PreparedRelease(
            op_id=uuid.uuid4().hex,
            deltas=summed_deltas(releases),
            proc_ids=tuple(r.proc_id for r in releases),
            show_ids=tuple(sorted({r.show_id for r in releases})),
        )
        if breaker.is_open():
            RELEASE_PUBLISH_FAILURES.labels(stage="breaker").inc()
            return None
        payload = "|".join(f"{key}|{cores}|{gpus}" for key, (cores, gpus) in prepared.deltas.items())
        ttl_ms = settings.ACCOUNTING_INFLIGHT_TTL_SECONDS * 1000
        try:
            # release_prepare.lua returns {seq, empty} on every path: a list reply.
            _, empty = cast(
                list,
                script("release_prepare").run_held(
                    self._client(),
                    keys=[keys.INFLIGHT, keys.SEQ, keys.SEEDED, FARM_LOCK_KEY],
                    args=[prepared.op_id, ttl_ms, payload, _bump()],
                ),
            )
        except Exception as error:  # noqa: BLE001 - the release commits whatever Redis does
            _failed(stage="prepare", what="release in-flight registration failed", prepared=prepared, error=error)
            return None
        if int(empty):
            rebuild_at_once()  # this release is the first to meet an empty Redis: its rebuild starts now
        return prepared

    def publish(self, *, prepared: PreparedRelease) -> int | None:
        args: list = [prepared.op_id, _bump()]
        for cores, gpus in prepared.deltas.values():
            args += [cores, gpus]
        started = time.perf_counter()
        try:
            # release.lua returns {applied, seq, clamped} on every path: a list reply.
            applied, seq, clamped = cast(
                list,
                script("release").run_held(self._client(), keys=[keys.INFLIGHT, keys.SEQ, *prepared.deltas], args=args),
            )
        except Exception as error:  # noqa: BLE001 - swallowed: never resent, the commit stands
            _failed(stage="publish", what="release publish failed and is not retried", prepared=prepared, error=error)
            return None
        finally:
            RELEASE_PUBLISH_SECONDS.observe(time.perf_counter() - started)
        if clamped:
            RELEASE_CLAMPED.inc(clamped)
            logger.warning(
                "release found %d counter(s) below what it took off, kept at 0: Redis counted low before it, "
                "until the next reseed: %s",
                clamped,
                _ids(prepared),
            )
        if not applied:
            RELEASE_PUBLISH_STALE.inc()
            logger.warning(
                "release found its in-flight entry gone (Redis restarted or the entry expired) and changed "
                "no counter, Redis left high until the next reseed: %s",
                _ids(prepared),
            )
        return seq


def made(*, prepared: PreparedRelease, releases: Sequence[Release]) -> PreparedRelease:
    """The registered operation narrowed to the releases the transaction actually made (a proc
    released meanwhile by someone else is not decremented twice); with none, its publish only
    settles the entry."""
    return replace(
        prepared,
        deltas=summed_deltas(releases),
        proc_ids=tuple(r.proc_id for r in releases),
        show_ids=tuple(sorted({r.show_id for r in releases})),
    )
