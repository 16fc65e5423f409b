"""A stalled accounting Redis (SIGSTOP of a redis-server of the test's own) during releases.

The bound this holds (docs/architecture.md, "A stalled Redis"): no PostgreSQL row lock is
held while a release waits on Redis; a Cuebot-managed release never waits on it; a
scheduler-managed release waits at most ACCOUNTING_REDIS_TIMEOUT per Redis step, and once
one has timed out, the breaker makes the others skip Redis at once for
ACCOUNTING_REDIS_BREAKER_SECONDS. Every skipped or failed step leaves Redis high.
"""

import threading
import time

import pytest
from django.db import connection, connections

from accounting.live import keys, scripts
from accounting.release import publish
from accounting.release.unbook import unbook_proc
from infra.redis_factory import accounting_redis
from shows.models import Host
from tests.farms import build_farm
from tests.redis_topology import redis_server

TIMEOUT = 1.0


@pytest.fixture
def stallable_redis(settings):
    with redis_server() as server:
        settings.ACCOUNTING_REDIS_URL = server.url()
        settings.ACCOUNTING_REDIS_TIMEOUT = TIMEOUT
        settings.ACCOUNTING_REDIS_BREAKER_SECONDS = 30  # stays open for the whole test
        accounting_redis.cache_clear()
        try:
            yield server
        finally:
            server.resume()
            accounting_redis.cache_clear()


def row_locks_of(pid: int) -> int:
    """Locks a backend holds that only a writing transaction takes (its xid, tuple locks)."""
    with connections["default"].cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND locktype IN ('transactionid', 'tuple')", [pid])
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_stalled_redis_holds_no_row_lock_and_stalls_no_cuebot_release(stallable_redis, monkeypatch):
    managed = build_farm(managed=True)
    cuebot = build_farm(managed=False)
    # Both shows' procs on one host: a release that held the host row while waiting on Redis
    # would hold up the Cuebot-managed release behind it.
    Host.objects.filter(pk=cuebot.host.pk).update(alloc=managed.alloc)
    waiting_proc = managed.add_proc(cores=200)
    skipped_proc = managed.add_proc(cores=300)
    cuebot_proc = cuebot.add_proc(cores=100, host=managed.host)
    for key in keys.of_proc(
        show_id=managed.show.id,
        alloc_id=managed.alloc.id,
        folder_id=managed.folder.id,
        job_id=managed.job.id,
        layer_id=managed.layer.id,
        dept_id=managed.dept.id,
    ):
        stallable_redis.client().hset(key, mapping={"int_cores": 5, "int_gpus": 0})

    in_redis_call = threading.Event()
    calls = []
    original_run = scripts.LuaScript.run_held

    def observed_run(self, client, **kwargs):  # the real call, only announced
        calls.append(self.name)
        in_redis_call.set()
        return original_run(self, client, **kwargs)

    monkeypatch.setattr(scripts.LuaScript, "run_held", observed_run)
    stallable_redis.pause()

    result = {}

    def release_while_stalled() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                result["pid"] = cursor.fetchone()[0]
            started = time.monotonic()
            result["release"] = unbook_proc(proc_id=waiting_proc.id)
            result["seconds"] = time.monotonic() - started
        finally:
            connections.close_all()

    waiter = threading.Thread(target=release_while_stalled)
    waiter.start()
    assert in_redis_call.wait(10)
    # The release is waiting on the stalled Redis: it holds no row lock, and a Cuebot-managed
    # release on the same host goes through meanwhile.
    assert row_locks_of(result["pid"]) == 0
    assert unbook_proc(proc_id=cuebot_proc.id) is not None
    assert waiter.is_alive()
    waiter.join()

    assert result["release"] is not None  # PostgreSQL committed whatever Redis did
    assert result["seconds"] < 2 * TIMEOUT + 1  # one timed-out step (the registration), no publish after it
    assert calls == ["release_prepare"]
    assert publish.breaker.is_open()

    # The breaker is open: the next release skips Redis at once.
    assert unbook_proc(proc_id=skipped_proc.id) is not None
    assert calls == ["release_prepare"]

    stallable_redis.resume()
    # Both releases left Redis high (5), never low: nothing was decremented.
    sub = keys.sub(show_id=managed.show.id, alloc_id=managed.alloc.id)
    assert stallable_redis.client(decode_responses=True).hget(sub, "int_cores") == "5"
