"""A new accounting Redis master is treated like a restart.

Replication is asynchronous: a promoted replica can miss the master's last writes. A lost
release leaves Redis high (safe); a lost booking or a lost reseed write leaves it low, and
the scheduler would overbook. So when the server answering is not the one the keys were
rebuilt on, the managed keys are closed to booking (no `acct:seeded`, no limit field, as
on a Redis that came up empty) and rebuilt from PostgreSQL through the bootstrap path
(in-flight wait, booked counters, limits, marker) before anything books on them again.

How it is noticed: each rebuild (or the first check on a Redis without one) records the
server's replication id (INFO replication `master_replid`) in `acct:master`. A promoted
replica carries its old master's value but has a new replication id. booking.lua compares
the two on every booking and refuses on a mismatch, so nothing books on a promoted replica
even before it is noticed here; this module closes and rebuilds it. One INFO and one GET
per check, every CHECK_INTERVAL_SECONDS, from a thread in every task worker process
(`start_master_watch`), whatever ACCOUNTING_RECONCILE_ENABLED says: the scheduler's own
bootstrap runs only on an empty Redis, and a promoted replica is not empty. The farm lock
and the close script's compare make one process do each close and each rebuild. The same
check (the same GET) notices a Redis with no `acct:seeded` marker and, where this service
reconciles, starts its rebuild at once (accounting.reconcile.empty).
"""

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import redis
from django.db import DatabaseError, close_old_connections

from accounting.live import keys
from accounting.live.leases import LockBusy
from accounting.live.scripts import script
from accounting.reconcile.empty import rebuild_at_once
from accounting.reconcile.reseed import FAILOVER_REBUILD, ReseedSkipped, bootstrap_if_owed
from accounting.reconcile.snapshot import chunked, limit_rows, managed_show_ids
from infra.era import era
from infra.metrics import REDIS_FAILOVERS, note_redis_master
from infra.redis_factory import accounting_redis, master_address, replication_state

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0
CLOSE_CHUNK_FIELDS = 4000


@dataclass(frozen=True)
class MasterCheck:
    address: str
    replication_id: str
    failover: bool  # this check found a new master and closed the managed keys
    rebuilt: bool  # this check finished a rebuild the close made owed


def close_managed_keys(*, recorded: str) -> bool:
    """Close every managed key for rebuilding; False when the server is the recorded one after
    all, or another process closed it first."""
    client = accounting_redis()
    fields = [(key, name) for key, name, _ in limit_rows(show_ids=managed_show_ids())]
    for n, chunk in enumerate(list(chunked(fields, CLOSE_CHUNK_FIELDS)) or [[]]):
        args = [recorded if n == 0 else "", *(part for pair in chunk for part in pair)]
        # failover_close.lua returns 0 or 1 on every path: an integer reply.
        closed = int(
            cast(
                int,
                script("failover_close").run(
                    client,
                    keys=[keys.MASTER, keys.SEEDED, keys.BOOTSTRAPPING, keys.REBUILD_OWED],
                    args=args,
                ),
            )
        )
        if not closed:
            return n > 0  # a later chunk refused: a rebuild (or a newer close) took over
    return True


def check_master(*, wait: Callable[[float], object] | None = None) -> MasterCheck:
    """One check: close the managed keys if the master changed, rebuild them if owed.
    `wait` replaces the rebuild's in-flight wait (tests control time)."""
    client = accounting_redis()
    address = master_address(client)  # for Sentinel, also drops pooled connections to a former master
    note_redis_master(address=address)
    role, replid, (recorded, seeded) = replication_state(client, keys.MASTER, keys.SEEDED)
    failover = False
    if role != "master":
        # A connection still open to a demoted master; the pool replaces it, the next check
        # reads the new master.
        return MasterCheck(address=address, replication_id=replid, failover=False, rebuilt=False)
    if seeded is None:
        # Empty (restarted) or closed by a failover: its rebuild starts now, not at the next
        # scheduled check, where this service reconciles (accounting.reconcile.empty).
        rebuild_at_once()
    if recorded is None:
        # Nothing recorded yet: a Redis that came up empty (whoever rebuilds it, this service
        # or the scheduler's bootstrap), or one seeded before masters were recorded. Its keys
        # belong to this server from now on.
        client.set(keys.MASTER, replid, nx=True)
    elif recorded.decode() != replid and close_managed_keys(recorded=recorded.decode()):
        failover = True
        REDIS_FAILOVERS.inc()
        log.warning(
            "accounting Redis master changed (now %s, replication id %s): managed keys closed to booking "
            "until rebuilt from PostgreSQL",
            address,
            replid,
        )
    try:
        rebuilt = bootstrap_if_owed(wait=wait)
    except (LockBusy, ReseedSkipped) as reason:
        log.info("rebuild after failover not done by this check (%r); the next one retries", reason)
        rebuilt = False
    return MasterCheck(address=address, replication_id=replid, failover=failover, rebuilt=rebuilt)


def watch_master(*, stop: threading.Event, interval: float = CHECK_INTERVAL_SECONDS) -> None:
    """Check until `stop` is set. A failed check (Redis between masters, PostgreSQL away) is
    logged once per outage and retried at the next interval."""
    failing = False
    while True:
        try:
            check_master()
            if failing:
                log.warning("accounting Redis master check works again")
            failing = False
        except (redis.RedisError, OSError, DatabaseError) as error:
            if not failing:
                log.warning("accounting Redis master check failed (%s); retrying every %s s", error, interval)
            failing = True
        finally:
            close_old_connections()
        if stop.wait(interval):
            return


_watch_started = threading.Lock()
_watching: list[threading.Thread] = []


def start_master_watch() -> None:
    """Start this process's watch thread, once (a task worker calls it when it starts). Not on an
    observer (ACCOUNTING_WRITES=off): closing and rebuilding the keys writes the scheduler's Redis."""
    if not era().keeps_redis or not FAILOVER_REBUILD.allowed:
        return
    with _watch_started:
        if _watching:
            return
        thread = threading.Thread(
            target=watch_master, kwargs={"stop": threading.Event()}, name="acct-master-watch", daemon=True
        )
        thread.start()
        _watching.append(thread)
