"""Redis faults on a private redis-server process: hung (SIGSTOP) while a lock is held."""

import threading
import time

import pytest
import redis

from accounting.live.leases import LEASE_SECONDS, PREFIX, LockBusy, named_lock
from accounting.reconcile.reseed import FARM_LOCK, bootstrap_if_empty
from infra.redis_factory import accounting_redis
from tests.redis_topology import await_true, redis_server

pytestmark = pytest.mark.django_db


@pytest.fixture
def private_redis(settings):
    """The accounting Redis is a redis-server of this test's own, which it may stop and resume."""
    with redis_server() as server:
        settings.ACCOUNTING_REDIS_URL = server.url()
        settings.ACCOUNTING_REDIS_TIMEOUT = 1.0
        accounting_redis.cache_clear()
        try:
            yield server
        finally:
            accounting_redis.cache_clear()


def test_lease_is_renewed_while_the_work_runs(private_redis):
    client = private_redis.client(decode_responses=True)
    with named_lock(name="long-work", ttl_seconds=0.3) as owner:
        threading.Event().wait(1.0)  # the work outlives its lease three times over
        assert client.get(PREFIX + "long-work") == owner
        assert 0 < client.pttl(PREFIX + "long-work") <= 300
    assert not client.exists(PREFIX + "long-work")


def test_lock_orphaned_by_a_hung_redis_frees_within_seconds(private_redis):
    """Redis hangs at the end of the bootstrap's in-flight wait: the bootstrap and the release
    of its lock in `finally` both time out. Once Redis answers again the next rebuild gets
    the lock within a lease, not after the longest a rebuild could take."""
    resume = threading.Timer(5.0, private_redis.resume)

    def hang_at_end_of_wait(seconds: float) -> None:
        private_redis.pause()
        resume.start()

    with pytest.raises(redis.exceptions.TimeoutError):
        bootstrap_if_empty(wait=hang_at_end_of_wait)
    resume.join()
    resumed_at = time.monotonic()

    def next_rebuild() -> bool:
        try:
            return bootstrap_if_empty(wait=lambda seconds: None)
        except LockBusy:
            return False

    await_true(next_rebuild, timeout=LEASE_SECONDS + 2, what="the next rebuild to get the farm lock", interval=0.1)
    print(f"rebuild got the lock {time.monotonic() - resumed_at:.1f} s after Redis resumed")
    assert not private_redis.client().exists(PREFIX + FARM_LOCK)
