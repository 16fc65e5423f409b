"""Rebuild the Redis live view from PostgreSQL: booked counters, limits, bootstrap.

Booked counters: read acct:seq, run ONE streamed SQL query (accounting.snapshot.BOOKED),
write it back in chunks, each a compare-and-swap on acct:seq (reseed_write.lua) that also
adds the amounts of in-flight operations. A chunk written is right as of its write, since
no mutation happened since the sequence was read; the first chunk that misses ends the
attempt and the whole cycle restarts after a jittered backoff, up to a bound, after which
the cycle is skipped, logged and counted (lessons item 3). Limits are configuration and are
written unconditionally (limit_write.lua, which bumps acct:seq).

Order: booked counters before limits. A key whose limits exist is open for booking, so it
must never be open with counters that read low (lessons items 1 and 2).
"""
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from itertools import islice

from accounting import keys
from accounting.locks import named_lock
from accounting.lua import script
from accounting.metrics import BOOTSTRAPS, RESEED_CAS_MISSES, RESEED_SECONDS, RESEED_SKIPPED
from accounting.snapshot import booked_rows, limit_rows, managed_show_ids
from cuebot_acct.redis_factory import accounting_redis

log = logging.getLogger(__name__)

CHUNK_KEYS = 2000
MAX_ATTEMPTS = 8
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_CAP_SECONDS = 2.0
FARM_LOCK = "acct-reseed"
LOCK_TTL_SECONDS = 600


class ReseedSkipped(Exception):
    """The booked-counter compare-and-swap missed on every attempt."""


@dataclass(frozen=True)
class BookedOutcome:
    written: bool
    keys: int
    attempts: int


def _chunks(rows: Iterable, size: int) -> Iterable[list]:
    iterator = iter(rows)
    while chunk := list(islice(iterator, size)):
        yield chunk


def backoff_seconds(*, attempt: int) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)], so retries of several
    reseeds (and of one reseed against a steady hot path) do not line up."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt))


def _attempt_booked(*, show_ids: Sequence[str], progress: Callable[[int], None]) -> int | None:
    """One cycle; the number of keys written, or None when the CAS missed."""
    client = accounting_redis()
    seq_before = client.get(keys.SEQ) or b""
    written = 0
    # closing(): a missed CAS leaves the loop early; end the snapshot's transaction and
    # server-side cursor then, not whenever the generator is collected.
    with closing(booked_rows(show_ids=show_ids)) as rows:
        for chunk in _chunks(rows, CHUNK_KEYS):
            args = [seq_before]
            for key, cores, gpus in chunk:
                args += [key, cores, gpus]
            ok, count = script("reseed_write").run(client, keys=[keys.SEQ, keys.INFLIGHT], args=args)
            if not int(ok):
                return None
            written += int(count)
            progress(int(count))
    return written


def reseed_booked(*, show_ids: Sequence[str], scope: str = "farm", max_attempts: int = MAX_ATTEMPTS,
                  progress: Callable[[int], None] = lambda n: None) -> BookedOutcome:
    """Write int_cores/int_gpus of every key of these shows from SUM(proc), under the CAS."""
    started = time.monotonic()
    try:
        for attempt in range(1, max_attempts + 1):
            written = _attempt_booked(show_ids=show_ids, progress=progress)
            if written is not None:
                return BookedOutcome(written=True, keys=written, attempts=attempt)
            RESEED_CAS_MISSES.inc()
            if attempt < max_attempts:
                time.sleep(backoff_seconds(attempt=attempt))
        RESEED_SKIPPED.labels(scope=scope).inc()
        log.warning("booked reseed (%s) skipped: acct:seq changed during each of %d attempts", scope, max_attempts)
        return BookedOutcome(written=False, keys=0, attempts=max_attempts)
    finally:
        RESEED_SECONDS.labels(kind="booked").observe(time.monotonic() - started)


def write_limits(*, show_ids: Sequence[str], progress: Callable[[int], None] = lambda n: None) -> int:
    """Write every limit field of these shows, unconditionally. Returns fields written."""
    started = time.monotonic()
    client = accounting_redis()
    written = 0
    for chunk in _chunks(limit_rows(show_ids=show_ids), CHUNK_KEYS * 3):
        args = [part for triple in chunk for part in triple]
        script("limit_write").run(client, keys=[keys.SEQ], args=args)
        written += len(chunk)
        progress(len(chunk))
    RESEED_SECONDS.labels(kind="limits").observe(time.monotonic() - started)
    return written


def seed_show(*, show_id: str) -> None:
    """Seed one show that was just switched to the scheduler: booked counters from its procs
    (under the CAS), then its limits. Raises ReseedSkipped, with no limits written (so the
    show books nothing rather than overbooks), if the CAS never wins; the next reseed heals."""
    with named_lock(name=f"{FARM_LOCK}:show:{show_id}", ttl_seconds=LOCK_TTL_SECONDS):
        if not reseed_booked(show_ids=[show_id], scope="show").written:
            raise ReseedSkipped(show_id)
        write_limits(show_ids=[show_id])


@dataclass(frozen=True)
class ReseedReport:
    shows: int
    booked: BookedOutcome | None
    limit_fields: int | None


def reseed(*, limits: bool = True, booked: bool = True, show_ids: Sequence[str] | None = None,
           progress: Callable[[int], None] = lambda n: None) -> ReseedReport:
    """The operator's and the scheduled reseed, under the farm lock (LockBusy if taken).

    `show_ids` defaults to every scheduler-managed show; limits are written even when the
    booked cycle is skipped, since they are configuration."""
    with named_lock(name=FARM_LOCK, ttl_seconds=LOCK_TTL_SECONDS):
        shows = list(show_ids) if show_ids is not None else managed_show_ids()
        booked_outcome = reseed_booked(show_ids=shows, progress=progress) if booked else None
        fields = write_limits(show_ids=shows, progress=progress) if limits else None
        return ReseedReport(shows=len(shows), booked=booked_outcome, limit_fields=fields)


def redis_is_empty() -> bool:
    """No acct:seq and no acct:* key: Redis restarted (it runs without persistence)."""
    client = accounting_redis()
    if client.exists(keys.SEQ):
        return False
    return next(iter(client.scan_iter(match="acct:*", count=1000)), None) is None


def bootstrap_if_empty() -> bool:
    """Rebuild everything when Redis is empty. True when it did; ReseedSkipped (limits not
    written) if the booked counters could not be written."""
    if not redis_is_empty():
        return False
    with named_lock(name=FARM_LOCK, ttl_seconds=LOCK_TTL_SECONDS):
        if not redis_is_empty():
            return False
        shows = managed_show_ids()
        log.warning("accounting Redis is empty: rebuilding %d scheduler-managed show(s)", len(shows))
        if not reseed_booked(show_ids=shows, scope="bootstrap").written:
            raise ReseedSkipped("bootstrap")
        write_limits(show_ids=shows)
        # With no managed show nothing above touched acct:seq; bump it so Redis no longer
        # reads as empty and the next check does not rebuild again.
        accounting_redis().incr(keys.SEQ)
        BOOTSTRAPS.inc()
        return True
