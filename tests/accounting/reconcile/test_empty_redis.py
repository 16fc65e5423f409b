"""An empty Redis is rebuilt as soon as something meets it (issue 42): the first release, or a
task worker's once-a-second master check, starts the bootstrap at once instead of leaving it
to the next scheduled check, and only where this service reconciles."""

import threading

import pytest

from accounting.live import keys
from accounting.live.leases import named_lock
from accounting.reconcile import empty, failover
from accounting.reconcile import reseed as reseed_module
from accounting.reconcile.reseed import FARM_LOCK, bootstrap_if_empty, redis_is_empty
from accounting.release import publish
from accounting.release.unbook import unbook_proc
from tests.farms import build_farm

# The rebuild thread reads PostgreSQL on a connection of its own: the farm must be committed.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def reconciling(settings, monkeypatch):
    """This service reconciles; the bootstrap's in-flight wait returns when the test says so."""
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    waited, go_on = [], threading.Event()

    def wait(seconds: float) -> None:
        waited.append(seconds)
        assert go_on.wait(timeout=30)

    monkeypatch.setattr(reseed_module, "inflight_wait", wait)
    return waited, go_on


@pytest.fixture
def started(monkeypatch):
    """The rebuild threads the release path and the master check start, for the test to join."""
    threads: list[threading.Thread | None] = []

    def recording() -> threading.Thread | None:
        threads.append(empty.rebuild_at_once())
        return threads[-1]

    monkeypatch.setattr(publish, "rebuild_at_once", recording)
    monkeypatch.setattr(failover, "rebuild_at_once", recording)
    return threads


@pytest.fixture
def restarted(acct_redis):
    """A managed show with two procs (3 and 2 cores), rebuilt, then emptied as a restart empties it."""
    farm = build_farm(managed=True)
    procs = [farm.add_proc(cores=300), farm.add_proc(cores=200)]
    assert bootstrap_if_empty(wait=lambda seconds: None)
    acct_redis.flushdb()
    return farm, procs


def sub(farm) -> str:
    return keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)


def test_the_first_release_to_meet_an_empty_redis_starts_its_rebuild(
    reconciling, started, restarted, acct_redis, settings
):
    waited, go_on = reconciling
    farm, (leaving, _) = restarted

    unbook_proc(proc_id=leaving.id)  # committed; the rebuild's wait holds it for the test
    assert len(started) == 1 and started[0] is not None
    # The next release meets a Redis a rebuild holds the farm lock of (or, before the thread took
    # it, a process that runs one already): nothing more starts.
    unbook_proc(proc_id=farm.add_proc(cores=100).id)
    assert not any(started[1:])
    assert acct_redis.hget(sub(farm), "burst") is None  # closed to booking through the wait

    go_on.set()
    started[0].join(timeout=30)
    assert waited == [settings.ACCOUNTING_INFLIGHT_TTL_SECONDS]  # the protocol's one TTL, from now
    assert not redis_is_empty()
    assert acct_redis.hmget(sub(farm), "int_cores", "burst") == ["2", "200"]  # SUM(proc), open again


def test_a_release_starts_nothing_while_a_rebuild_holds_the_lock(reconciling, started, restarted):
    farm, (leaving, _) = restarted
    with named_lock(name=FARM_LOCK):  # another process noticed first and rebuilds
        unbook_proc(proc_id=leaving.id)
    assert started == []


def test_where_this_service_does_not_reconcile_a_release_leaves_the_rebuild_to_the_scheduler(
    started, restarted, settings
):
    settings.ACCOUNTING_RECONCILE_ENABLED = False  # the scheduler's own bootstrap rebuilds
    _, (leaving, _) = restarted
    unbook_proc(proc_id=leaving.id)
    assert started == [None] and redis_is_empty()


def test_a_release_on_a_seeded_redis_starts_nothing(reconciling, started, acct_redis):
    farm = build_farm(managed=True)
    leaving = farm.add_proc(cores=300)
    assert bootstrap_if_empty(wait=lambda seconds: None)
    unbook_proc(proc_id=leaving.id)
    assert started == []


def test_a_task_workers_master_check_starts_the_rebuild_of_a_redis_nothing_releases_on(
    reconciling, started, restarted, acct_redis
):
    waited, go_on = reconciling
    farm, _ = restarted
    go_on.set()
    failover.check_master()
    assert len(started) == 1 and started[0] is not None
    started[0].join(timeout=30)
    assert not redis_is_empty()
    assert acct_redis.hmget(sub(farm), "int_cores", "burst") == ["5", "200"]
