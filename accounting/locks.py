"""Named leases in Redis for operations that must not overlap.

A lock is a key with an owner token and an expiry: taken only when free (SET NX PX),
released only by its owner (a compare-and-delete script), and never held forever, since
a holder that dies simply lets the expiry run out. They live in the accounting Redis
because a cache flush must not drop them.
"""
import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from accounting.lua import script
from cuebot_acct.redis_factory import accounting_redis

PREFIX = "cuebot-acct:lock:"


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


def release(*, name: str, owner: str) -> bool:
    return bool(script("lock_release").run(accounting_redis(), keys=[PREFIX + name], args=[owner]))


@contextmanager
def named_lock(*, name: str, ttl_seconds: float) -> Iterator[str]:
    """Hold `name` for the block; LockBusy if someone else has it. Released on error too."""
    owner = new_owner()
    if not acquire(name=name, ttl_seconds=ttl_seconds, owner=owner):
        raise LockBusy(name)
    try:
        yield owner
    finally:
        release(name=name, owner=owner)


def held_locks() -> list[HeldLock]:
    client = accounting_redis()
    found = []
    for key in client.scan_iter(match=PREFIX + "*", count=500):
        owner, ttl_ms = client.get(key), client.pttl(key)
        if owner is not None and ttl_ms > 0:
            found.append(HeldLock(name=key.decode()[len(PREFIX):], owner=owner.decode(), ttl_ms=ttl_ms))
    return sorted(found, key=lambda lock: lock.name)
