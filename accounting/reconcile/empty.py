"""An empty accounting Redis is rebuilt as soon as a release, or a task worker's check, meets it.

Redis runs without persistence: a restart empties it, and booking stays closed until the
bootstrap (accounting.reconcile.reseed) has waited one in-flight TTL and rebuilt the keys. The
wait is the protocol's; what came on top of it was noticing: the scheduled check looks every
10 s and django-q's scheduler adds its own slack, and booking reopened 28 s after a restart
with a 10 s TTL (issue 42; docs/design.md#lessons, the tenth). A release meets the empty Redis
within milliseconds under load: release_prepare.lua says when there is neither an
`acct:seeded` marker nor a rebuild holding the farm lock, and the releasing process starts the
bootstrap at once, in a thread of its own so that the release does not wait for it. Every
task worker's once-a-second master check does the same (accounting.reconcile.failover), for a
Redis nothing releases on: the scheduler's bookings, refused on its closed keys, cannot tell
this service.

Only where this service reconciles (ACCOUNTING_RECONCILE_ENABLED) and writes (ACCOUNTING_WRITES),
as for the scheduled check:
elsewhere the scheduler's own bootstrap rebuilds Redis, and it writes no marker. The farm
lock makes one process rebuild; a process whose thread finds it taken leaves it at that.
"""

import logging
import threading

import redis
from django.conf import settings
from django.db import DatabaseError, connection

from accounting.live.leases import LockBusy, lock_key
from accounting.reconcile.reseed import FARM_LOCK, REDIS_REBUILD, ReseedSkipped, bootstrap_if_empty

log = logging.getLogger(__name__)

# The key that says a rebuild (or any farm reseed) is under way, for release_prepare.lua.
FARM_LOCK_KEY = lock_key(name=FARM_LOCK)

# One rebuild thread per process at a time: the releases that meet the Redis while it runs
# start nothing more.
_running = threading.Lock()


def rebuild_at_once() -> threading.Thread | None:
    """Start the rebuild of an empty Redis in a thread of this process; the thread, or None
    where this service does not reconcile or this process already runs one."""
    if not (settings.ACCOUNTING_RECONCILE_ENABLED and REDIS_REBUILD.allowed) or not _running.acquire(blocking=False):
        return None
    try:
        thread = threading.Thread(target=_rebuild, name="acct-empty-redis-rebuild", daemon=True)
        thread.start()
    except BaseException:
        _running.release()
        raise
    return thread


def _rebuild() -> None:
    try:
        bootstrap_if_empty()
    except LockBusy:
        pass  # another process noticed first and rebuilds
    except ReseedSkipped as reason:
        log.warning(
            "empty accounting Redis not rebuilt by this attempt (%r); the next release or check retries", reason
        )
    except (redis.RedisError, OSError, DatabaseError) as error:
        log.warning("empty accounting Redis: rebuild failed (%s); the next release or check retries", error)
    finally:
        connection.close()  # this thread's own, opened for the snapshot
        _running.release()
