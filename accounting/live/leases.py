"""Named leases in Redis for operations that must not overlap.

A lock is a key with an owner token and a short lease: taken only when free (SET NX PX),
renewed by a thread of its holder while the work runs (an owner-checked PEXPIRE), and
released by its owner (a compare-and-delete script). A lock therefore lives about as long
as its work: a holder that dies, or whose release in `finally` cannot reach a Redis that
hung, stops renewing and the lease runs out within LEASE_SECONDS, not after the longest
the work could ever take. They live in the accounting Redis because a cache flush must not
drop them.
"""
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import redis

from accounting.live.scripts import script
from cuebot_acct.redis_factory import accounting_redis

log = logging.getLogger(__name__)

PREFIX = "cuebot-acct:lock:"
# Short enough that recovery after a Redis fault is measured in seconds, long enough that
# two missed renewals (each bounded by ACCOUNTING_REDIS_TIMEOUT) do not lose the lock.
LEASE_SECONDS = 6.0
RENEWALS_PER_LEASE = 3


class LockBusy(Exception):
    """Another owner holds the lock."""


@dataclass(frozen=True)
class HeldLock:
    name: str
    owner: str
    ttl_ms: int


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def acquire(*, name: str, ttl_seconds: float, owner: str) -> bool:
    return bool(accounting_redis().set(PREFIX + name, owner, nx=True, px=int(ttl_seconds * 1000)))


def extend(*, name: str, owner: str, ttl_seconds: float) -> bool:
    """Give the lease `ttl_seconds` from now; False when `owner` no longer holds it."""
    return bool(script("lock_extend").run(accounting_redis(), keys=[PREFIX + name], args=[owner, int(ttl_seconds * 1000)]))


def release(*, name: str, owner: str) -> bool:
    return bool(script("lock_release").run(accounting_redis(), keys=[PREFIX + name], args=[owner]))


def _renew_until(done: threading.Event, *, name: str, owner: str, ttl_seconds: float) -> None:
    while not done.wait(ttl_seconds / RENEWALS_PER_LEASE):
        try:
            if not extend(name=name, owner=owner, ttl_seconds=ttl_seconds):
                log.warning("lock %s lost its lease while its work still runs (Redis stalled or restarted)", name)
                return
        except (redis.RedisError, OSError) as error:
            # The next renewal tries again; if Redis stays away the lease simply runs out.
            log.warning("lock %s: lease renewal failed (%s)", name, error)


@contextmanager
def named_lock(*, name: str, ttl_seconds: float = LEASE_SECONDS) -> Iterator[str]:
    """Hold `name` for the block; LockBusy if someone else has it. The lease (`ttl_seconds`)
    is renewed while the block runs; released on error too."""
    owner = new_owner()
    if not acquire(name=name, ttl_seconds=ttl_seconds, owner=owner):
        raise LockBusy(name)
    done = threading.Event()
    renewer = threading.Thread(target=_renew_until, args=(done,), kwargs=dict(name=name, owner=owner, ttl_seconds=ttl_seconds),
                               name=f"lock-lease:{name}", daemon=True)
    renewer.start()
    try:
        yield owner
    finally:
        done.set()
        renewer.join()
        release(name=name, owner=owner)


def held_locks() -> list[HeldLock]:
    client = accounting_redis()
    found = []
    for key in client.scan_iter(match=PREFIX + "*", count=500):
        owner, ttl_ms = client.get(key), client.pttl(key)
        if owner is not None and ttl_ms > 0:
            found.append(HeldLock(name=key.decode()[len(PREFIX):], owner=owner.decode(), ttl_ms=ttl_ms))
    return sorted(found, key=lambda lock: lock.name)
