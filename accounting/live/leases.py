"""Named leases in Redis for operations that must not overlap.

A lock is redis-py's `redis.lock.Lock`: a key holding its owner's token with a short lease,
taken only when free (SET NX PX, `blocking=False`), renewed by its owner (`reacquire`, an
owner-checked PEXPIRE back to the full lease) and released by its owner (compare-and-delete).
They live in the accounting Redis because a cache flush must not drop them.

What is ours, and why:
- The renewal thread. A lease outlives its holder by at most LEASE_SECONDS: a holder that
  dies, or whose release in `finally` cannot reach a Redis that hung, stops renewing and the
  lease runs out in seconds, not after the longest the work could ever take. redis-py's Lock
  has no renewal of its own, only the calls one is made of.
- The owner token (host:pid:random), so that `held_locks()` and the API name who holds a lock.
  The Lock is built with `thread_local=False`: the renewal thread must see the token its
  acquiring thread set.
"""

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import redis
from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from infra.redis_factory import accounting_redis

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


def lock_key(*, name: str) -> str:
    """The Redis key of the lock `name`: for a script that asks whether it is held."""
    return PREFIX + name


def _lock(*, name: str, ttl_seconds: float | None = None) -> Lock:
    return Lock(accounting_redis(), lock_key(name=name), timeout=ttl_seconds, blocking=False, thread_local=False)


def acquire(*, name: str, ttl_seconds: float, owner: str) -> bool:
    return _lock(name=name, ttl_seconds=ttl_seconds).acquire(token=owner)


def release(*, name: str, owner: str) -> bool:
    """Delete the lock if `owner` holds it; False when it is gone or someone else's."""
    try:
        # do_release: the owner's compare-and-delete, for a caller that holds a token, not a Lock.
        _lock(name=name).do_release(owner)
    except LockNotOwnedError:
        return False
    return True


def _renew_until(done: threading.Event, *, lock: Lock) -> None:
    # named_lock, the only caller, builds the lock with its ttl_seconds, a float: never None here.
    assert lock.timeout is not None
    while not done.wait(lock.timeout / RENEWALS_PER_LEASE):
        try:
            lock.reacquire()
        except LockNotOwnedError:
            log.warning(
                "lock %s lost its lease while its work still runs (Redis stalled or restarted)",
                lock.name[len(PREFIX) :],
            )
            return
        except (redis.RedisError, OSError) as error:
            # The next renewal tries again; if Redis stays away the lease simply runs out.
            log.warning("lock %s: lease renewal failed (%s)", lock.name[len(PREFIX) :], error)


@contextmanager
def named_lock(*, name: str, ttl_seconds: float = LEASE_SECONDS) -> Iterator[str]:
    """Hold `name` for the block; LockBusy if someone else has it. The lease (`ttl_seconds`)
    is renewed while the block runs; released on error too."""
    owner = new_owner()
    lock = _lock(name=name, ttl_seconds=ttl_seconds)
    if not lock.acquire(token=owner):
        raise LockBusy(name)
    done = threading.Event()
    renewer = threading.Thread(
        target=_renew_until, args=(done,), kwargs=dict(lock=lock), name=f"lock-lease:{name}", daemon=True
    )
    renewer.start()
    try:
        yield owner
    finally:
        done.set()
        renewer.join()
        try:
            lock.release()
        except LockNotOwnedError:
            pass  # the lease ran out (the renewer said so) and the key is gone or another's


def held_locks() -> list[HeldLock]:
    client = accounting_redis()
    found = []
    for key in client.scan_iter(match=PREFIX + "*", count=500):
        owner, ttl_ms = client.get(key), client.pttl(key)
        if owner is not None and ttl_ms > 0:
            # The accounting client does not decode responses: key and value are bytes.
            name = cast(bytes, key).decode()[len(PREFIX) :]
            found.append(HeldLock(name=name, owner=cast(bytes, owner).decode(), ttl_ms=ttl_ms))
    return sorted(found, key=lambda lock: lock.name)
