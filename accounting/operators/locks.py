"""The named locks held now, for the locks endpoint."""

from dataclasses import dataclass

from django.conf import settings

from accounting.live.leases import held_locks
from accounting.reconcile.recalculate_subs import RECALCULATE_SUBS_LOCK, advisory_lock_holder


@dataclass(frozen=True)
class NamedLock:
    name: str
    owner: str
    ttl_ms: int | None  # None: no expiry, it ends with its holder's transaction


def named_locks() -> list[NamedLock]:
    """Every named lock held now: the Redis leases (where there is an accounting Redis) and
    recalculate_subs's PostgreSQL lock (where there is none)."""
    leases = held_locks() if settings.ACCOUNTING_REDIS_ENABLED else []
    found = [NamedLock(name=lease.name, owner=lease.owner, ttl_ms=lease.ttl_ms) for lease in leases]
    if (pid := advisory_lock_holder()) is not None:
        found.append(NamedLock(name=RECALCULATE_SUBS_LOCK, owner=f"PostgreSQL backend {pid}", ttl_ms=None))
    return sorted(found, key=lambda lock: lock.name)
