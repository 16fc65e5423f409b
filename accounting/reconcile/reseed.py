"""Rebuild the Redis live view from PostgreSQL: booked counters, limits, bootstrap.

Booked counters: note where the settle journal stands (reseed_begin.lua), run ONE streamed
SQL query (accounting.reconcile.snapshot.BOOKED), write it back in chunks (reseed_write.lua),
each adding the amounts of in-flight operations and of the bookings settled since the reseed
began, whose procs the snapshot may have missed. No booking or release can take such a write
low (reseed_write.lua says why), so the reseed finishes under any load, where a
compare-and-swap on acct:seq missed as long as bookings kept landing. The rebuild of an
empty or promoted Redis writes closed keys instead (no journal needed: nothing books them).
A write is refused only when Redis restarted or failed over since the reseed began, or its
journal was trimmed past the beginning (a reseed slower than 20,000 settles); the cycle then
restarts after a jittered backoff, up to a bound, after which it is skipped, logged and
counted: a reseed must be able to win under load, and say so when it does not (docs/design.md#lessons,
the third). Limits are configuration and are written unconditionally
(limit_write.lua, which bumps acct:seq).

Order: booked counters before limits. A key whose limits exist is open for booking, so it
must never be open with counters that read low (docs/design.md#lessons, the first two: a key
without limits rejects every booking, and a switched show must start with its booked counters).

Empty Redis (a restart: it runs without persistence): `acct:seeded` is missing. Limit
writes then refuse (limit_write.lua's guard), so no key opens before the bootstrap has
waited out the in-flight TTL and rebuilt the booked counters (docs/redis-protocol.md).
"""

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import cast

from django.conf import settings
from redis.backoff import FullJitterBackoff

from accounting.live import keys
from accounting.live.leases import named_lock
from accounting.live.scripts import script
from accounting.models import Subscription
from accounting.reconcile.snapshot import booked_rows, chunked, limit_rows, managed_show_ids
from infra.metrics import BOOTSTRAPS, REBUILDS, RESEED_SECONDS, RESEED_SKIPPED, RESEED_WRITES_REFUSED
from infra.redis_factory import accounting_redis
from infra.writes import REDIS_ONLY, Write

log = logging.getLogger(__name__)

CHUNK_KEYS = 2000
MAX_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
FARM_LOCK = "acct-reseed"


class ReseedSkipped(Exception):
    """The booked-counter write was refused on every attempt."""


@dataclass(frozen=True)
class BookedOutcome:
    written: bool
    keys: int
    attempts: int


# Full jitter (uniform in [0, min(cap, base * 2**attempt)]), so retries of several reseeds
# (and of one reseed against a steady hot path) do not line up.
_BACKOFF = FullJitterBackoff(cap=BACKOFF_CAP_SECONDS, base=BACKOFF_BASE_SECONDS)


def backoff_seconds(*, attempt: int) -> float:
    return _BACKOFF.compute(attempt)


def _attempt_booked(
    *, show_ids: Sequence[str], progress: Callable[[int], None], closed_token: str | None
) -> int | None:
    """One cycle; the number of keys written, or None when the write was refused (Redis
    restarted or failed over, the journal was trimmed, or the closed keys' rebuild no longer
    owns Redis)."""
    client = accounting_redis()
    if closed_token is None:
        mode = ["journal", script("reseed_begin").run(client, keys=[keys.SETTLED_SEQ], args=[])]
    else:
        mode = ["closed", closed_token]
    written = 0
    # closing(): a refused write leaves the loop early; end the snapshot's transaction and
    # server-side cursor then, not whenever the generator is collected.
    with closing(booked_rows(show_ids=show_ids)) as rows:
        for chunk in chunked(rows, CHUNK_KEYS):
            args = list(mode)
            for key, cores, gpus, _ in chunk:
                args += [key, cores, gpus]
            # reseed_write.lua returns a table on every path ({1, written, skipped} or {0, why}): a list reply.
            ok, count, *_ = cast(
                list,
                script("reseed_write").run(
                    client,
                    keys=[keys.SEQ, keys.INFLIGHT, keys.BOOTSTRAPPING, keys.SETTLED_SEQ, keys.SETTLED],
                    args=args,
                ),
            )
            if not int(ok):
                log.info("booked reseed write refused: %s", count.decode() if isinstance(count, bytes) else count)
                return None
            written += int(count)
            progress(int(count))
    return written


def reseed_booked(
    *,
    show_ids: Sequence[str],
    scope: str = "farm",
    max_attempts: int = MAX_ATTEMPTS,
    progress: Callable[[int], None] = lambda n: None,
    closed_token: str | None = None,
) -> BookedOutcome:
    """Write int_cores/int_gpus of every key of these shows from SUM(proc) plus what is in
    flight or settled since the reseed began; or, with `closed_token`, the rebuild of keys
    closed to booking that holds that token. Both finish whatever the booking and release
    rates (reseed_write.lua says why)."""
    started = time.monotonic()
    try:
        for attempt in range(1, max_attempts + 1):
            written = _attempt_booked(show_ids=show_ids, progress=progress, closed_token=closed_token)
            if written is not None:
                return BookedOutcome(written=True, keys=written, attempts=attempt)
            RESEED_WRITES_REFUSED.inc()
            if closed_token is not None:
                # The rebuild's token was dropped (Redis restarted or failed over) or replaced
                # (another rebuild began): nothing writes it back, so no later attempt can
                # succeed. The bootstrap decides whether to start over.
                return BookedOutcome(written=False, keys=0, attempts=attempt)
            if attempt < max_attempts:
                time.sleep(backoff_seconds(attempt=attempt))
        RESEED_SKIPPED.labels(scope=scope).inc()
        log.warning("booked reseed (%s) skipped: its write was refused on each of %d attempts", scope, max_attempts)
        return BookedOutcome(written=False, keys=0, attempts=max_attempts)
    finally:
        RESEED_SECONDS.labels(kind="booked").observe(time.monotonic() - started)


def write_limits(
    *,
    show_ids: Sequence[str],
    guard: tuple[str, str] | None = (keys.SEEDED, keys.SEEDED_VALUE),
    opens: bool = False,
    progress: Callable[[int], None] = lambda n: None,
) -> int | None:
    """Write every limit field of these shows while `guard` (key, value) holds in Redis (by
    default: while Redis is seeded; None: unconditionally). Returns fields written, or None
    when the guard failed (Redis restarted: the bootstrap will write them all).

    The subscription limits of a show closed by its switch (close_show) are written, opening it,
    only with `opens`: by a caller that has just written these shows' booked counters."""
    started = time.monotonic()
    client = accounting_redis()
    written = 0
    guard_key, guard_value = guard or (keys.SEEDED, "")
    for chunk in chunked(limit_rows(show_ids=show_ids), CHUNK_KEYS * 3):
        args = [guard_value, "open" if opens else "0"] + [part for triple in chunk for part in triple]
        # limit_write.lua returns 0 or the new sequence number on every path: an integer reply.
        if not int(
            cast(
                int,
                script("limit_write").run(
                    client, keys=[keys.SEQ, guard_key, keys.LIMITS_REFUSED, keys.CLOSED_SHOWS], args=args
                ),
            )
        ):
            log.warning("limit write stopped after %d fields: the accounting Redis is not seeded (restarted?)", written)
            return None
        written += len(chunk)
        progress(len(chunk))
    RESEED_SECONDS.labels(kind="limits").observe(time.monotonic() - started)
    return written


# The limit fields of a subscription key. Without its burst, booking.lua refuses every core booking
# on that subscription: the key is closed (as the bootstrap leaves keys until it writes limits).
SUBSCRIPTION_LIMIT_FIELDS = ("size", "burst")


def _subscription_keys(*, show_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(show id, Redis key) of every subscription of these shows."""
    subscriptions = Subscription.objects.filter(show_id__in=show_ids).values_list("show_id", "alloc_id")
    return [(show_id, keys.sub(show_id=show_id, alloc_id=alloc_id)) for show_id, alloc_id in subscriptions]


def close_show(*, show_id: str) -> None:
    """Close a show to booking in Redis: its subscription keys lose their limit fields, in one
    MULTI, and the show joins acct:closed_shows, so that no limit write opens them again but one
    that follows fresh booked counters (limit_write.lua). Raises the Redis error if that cannot
    be done.

    A show that leaves the scheduler keeps its keys as they were, limits included, and its
    counters stop following its procs while Cuebot books and releases them. Before it switches
    back, its keys are closed, so that the scheduler, which may read the new flag as soon as it
    commits, cannot book against those counters; seed_show then writes the counters, then the
    limits that open the keys again."""
    with accounting_redis().pipeline(transaction=True) as pipe:
        pipe.sadd(keys.CLOSED_SHOWS, show_id)
        for _, key in _subscription_keys(show_ids=[show_id]):
            pipe.hdel(key, *SUBSCRIPTION_LIMIT_FIELDS)
        pipe.execute()


def open_to_booking(*, show_ids: Sequence[str]) -> list[str]:
    """The shows with a subscription key that carries a burst; booking.lua refuses every core
    booking of the others (closed: by their switch to the scheduler until seed_show opens them,
    or a Redis not rebuilt since it came up)."""
    subscriptions = _subscription_keys(show_ids=show_ids)
    with accounting_redis().pipeline(transaction=False) as pipe:
        for _, key in subscriptions:
            pipe.hexists(key, "burst")
        bursts = pipe.execute()
    return sorted({show_id for (show_id, _), has_burst in zip(subscriptions, bursts) if has_burst})


def seed_show(*, show_id: str) -> None:
    """Seed one show that was just switched to the scheduler: booked counters from its procs
    (plus what is in flight or settled since the reseed began, as reseed_booked writes them), then
    its limits. Raises ReseedSkipped, with no limits written (so the show books nothing rather
    than overbooks), if each attempt's write was refused (Redis restarted or failed over, or the
    settle journal trimmed past the reseed's start); the next reseed heals.

    Its limits are written even on a Redis not seeded since a restart: until the switch the
    scheduler booked nothing for this show, so none of its bookings can straddle the restart.
    On such a Redis, when this is the only scheduler-managed show, its keys are all there is
    to rebuild: Redis is then marked seeded, as the bootstrap marks it, so the next reseed
    does not close the keys for an in-flight TTL believing Redis empty. With other managed
    shows, their keys still need the bootstrap, and the marker waits for it."""
    with named_lock(name=f"{FARM_LOCK}:show:{show_id}"):
        token = _claim_rebuild_if_only_show(show_id=show_id)
        if not reseed_booked(show_ids=[show_id], scope="show").written:
            raise ReseedSkipped(show_id)
        write_limits(show_ids=[show_id], guard=None, opens=True)
        if token is not None:
            _finish_rebuild(token=token)


def _claim_rebuild_if_only_show(*, show_id: str) -> str | None:
    """On an unseeded Redis whose only scheduler-managed show is this one, take the rebuild's
    token (as a bootstrap does), so a restart before the marker is written is noticed."""
    if not redis_is_empty() or managed_show_ids() != [show_id]:
        return None
    token = uuid.uuid4().hex
    accounting_redis().set(keys.BOOTSTRAPPING, token)
    return token


def _finish_rebuild(*, token: str) -> bool:
    """Mark Redis seeded if the rebuild that holds `token` still owns it (bootstrap_finish.lua)."""
    # bootstrap_finish.lua returns 0 or 1 on every path: an integer reply.
    return bool(
        int(
            cast(
                int,
                script("bootstrap_finish").run(
                    accounting_redis(),
                    keys=[keys.SEEDED, keys.BOOTSTRAPPING, keys.LIMITS_REFUSED, keys.MASTER, keys.REBUILD_OWED],
                    args=[token, keys.SEEDED_VALUE],
                ),
            )
        )
    )


@dataclass(frozen=True)
class ReseedReport:
    shows: int
    booked: BookedOutcome | None
    limit_fields: int | None
    bootstrapped: bool = False


# What writes the scheduler's Redis counters, as its faces declare it and its refusal names it.
REDIS_RESEED = Write(action="the reseed of the scheduler's Redis counters", grant=REDIS_ONLY)
REDIS_REBUILD = Write(action="the rebuild of an empty accounting Redis", grant=REDIS_ONLY)
FAILOVER_REBUILD = Write(action="the rebuild of the accounting Redis after a failover", grant=REDIS_ONLY)


def reseed(
    *,
    limits: bool = True,
    booked: bool = True,
    show_ids: Sequence[str] | None = None,
    progress: Callable[[int], None] = lambda n: None,
) -> ReseedReport:
    """The operator's and the scheduled reseed, under the farm lock (LockBusy if taken).

    `show_ids` defaults to every scheduler-managed show; limits are written even when the
    booked cycle is skipped, since they are configuration. With limits, on a Redis not
    seeded since its restart, this is the bootstrap (every managed show, after the
    in-flight wait): limits written straight away could open keys that read low."""
    REDIS_RESEED.require()
    with named_lock(name=FARM_LOCK):
        if limits and redis_is_empty():
            return _bootstrap(wait=None, progress=progress)
        shows = list(show_ids) if show_ids is not None else managed_show_ids()
        booked_outcome = reseed_booked(show_ids=shows, progress=progress) if booked else None
        opens = booked_outcome is not None and booked_outcome.written
        fields = write_limits(show_ids=shows, opens=opens, progress=progress) if limits else None
        return ReseedReport(shows=len(shows), booked=booked_outcome, limit_fields=fields)


def redis_is_empty() -> bool:
    """No acct:seeded marker: Redis restarted (it runs without persistence) and has not been
    rebuilt since. acct:seq and acct:inflight prove nothing: settles and releases recreate
    them on an empty Redis."""
    return not accounting_redis().exists(keys.SEEDED)


def inflight_wait(seconds: float) -> None:
    threading.Event().wait(seconds)  # never set: a plain interval


def _bootstrap(
    *, wait: Callable[[float], object] | None, progress: Callable[[int], None] = lambda n: None
) -> ReseedReport:
    """Rebuild an empty Redis; the caller holds the farm lock.

    A booking whose script ran before the restart lost its in-flight entry with it, and its
    proc may commit after our SUM(proc): counted by neither, the key would read low. So the
    keys stay closed to booking (no limit field: booking.lua rejects without a burst) for
    one in-flight TTL, after which every such booking has committed its proc or expired;
    then booked counters, then limits, then the marker. The token makes those writes refuse if
    Redis restarted again (or another bootstrap began) meanwhile. A restart (or failover close)
    that dropped the token starts over at once, with a new token and a whole wait: it may have lost
    in-flight entries too (left to the next caller's check, the keys stayed closed that long)."""
    client = accounting_redis()
    ttl = settings.ACCOUNTING_INFLIGHT_TTL_SECONDS
    for _ in range(MAX_ATTEMPTS):
        token = uuid.uuid4().hex
        client.set(keys.BOOTSTRAPPING, token)
        log.warning(
            "accounting Redis is empty: keys stay closed to booking for %s s (the in-flight TTL), then rebuild", ttl
        )
        (wait or inflight_wait)(ttl)
        shows = managed_show_ids()
        outcome = reseed_booked(show_ids=shows, scope="bootstrap", progress=progress, closed_token=token)
        fields = (
            write_limits(show_ids=shows, guard=(keys.BOOTSTRAPPING, token), opens=True, progress=progress)
            if outcome.written
            else None
        )
        if fields is not None and _finish_rebuild(token=token):
            log.warning("accounting Redis rebuilt: %d scheduler-managed show(s)", len(shows))
            BOOTSTRAPS.inc()
            REBUILDS.inc()
            return ReseedReport(shows=len(shows), booked=outcome, limit_fields=fields, bootstrapped=True)
        # A token still there belongs to another rebuild, which finishes; a marker means one did.
        if client.exists(keys.BOOTSTRAPPING) or not redis_is_empty():
            break
        log.warning("accounting Redis restarted again (or failed over) during its rebuild: starting over")
    RESEED_SKIPPED.labels(scope="bootstrap").inc()
    return ReseedReport(shows=len(shows), booked=outcome, limit_fields=fields, bootstrapped=False)


def bootstrap_if_empty(*, wait: Callable[[float], object] | None = None) -> bool:
    """Rebuild everything when Redis is empty. True when it did; ReseedSkipped if it could not
    finish (another rebuild took it over, or Redis restarted again during each of its
    MAX_ATTEMPTS rounds): no marker, so the next check starts over. `wait` replaces the
    in-flight wait (tests control time)."""
    REDIS_REBUILD.require()
    if not redis_is_empty():
        return False
    with named_lock(name=FARM_LOCK):
        if not redis_is_empty():
            return False
        if not _bootstrap(wait=wait).bootstrapped:
            raise ReseedSkipped("bootstrap")
        return True


def bootstrap_if_owed(*, wait: Callable[[float], object] | None = None) -> bool:
    """Rebuild the keys a failover closed (accounting.reconcile.failover). Unlike an empty Redis, this
    does not wait for ACCOUNTING_RECONCILE_ENABLED: the scheduler's own bootstrap runs only on
    an empty Redis, and a promoted replica is not empty. True when it did; LockBusy or
    ReseedSkipped as bootstrap_if_empty."""
    FAILOVER_REBUILD.require()
    if not accounting_redis().exists(keys.REBUILD_OWED):
        return False
    with named_lock(name=FARM_LOCK):
        if not accounting_redis().exists(keys.REBUILD_OWED):
            return False
        if not _bootstrap(wait=wait).bootstrapped:
            raise ReseedSkipped("rebuild after failover")
        return True
