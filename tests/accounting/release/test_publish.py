"""The release publisher when Redis fails: stopped, hanging, script cache flushed.

Every failure must leave the PG commit standing, log a WARN naming procs and shows,
count a failure, and never send a release twice.
"""

import logging
import threading
import time

import pytest
import redis
from django.conf import settings as django_settings
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.models import Proc
from accounting.reconcile.reseed import bootstrap_if_empty
from accounting.release.publish import (
    NoopReleasePublisher,
    RedisReleasePublisher,
    breaker,
)
from accounting.release.unbook import unbook_proc
from infra.redis_factory import accounting_redis
from tests.accounting.release.test_unbook import hashes, seed_keys
from tests.processes import closed_port

BUSY_SCRIPT = """
local start = redis.call('TIME')
local t = start
repeat t = redis.call('TIME') until (t[1] - start[1]) * 1000000 + (t[2] - start[2]) > tonumber(ARGV[1])
return 1
"""


def failures(stage: str) -> float:
    return REGISTRY.get_sample_value("cuebot_acct_release_publish_failures_total", {"stage": stage}) or 0.0


class _Sends(list):
    def __init__(self):
        super().__init__()
        self.loads: list[bytes] = []

    def clear(self) -> None:
        super().clear()
        self.loads.clear()


@pytest.fixture
def evalsha_sends(monkeypatch):
    """The EVALSHA and SCRIPT LOAD commands this process writes to any socket, EVALSHA in the
    list, SCRIPT LOAD in its `loads` (counted here, not in the server's commandstats, which
    every client of the server, `make run`'s service included, adds to)."""
    sent = _Sends()
    connection_class = type(accounting_redis().connection_pool.get_connection())
    original = connection_class.send_packed_command

    def counting(self, command, check_health=True):
        packed = command if isinstance(command, bytes) else b"".join(command)
        if b"EVALSHA" in packed.upper():
            sent.append(packed)
        elif b"SCRIPT" in packed.upper() and b"LOAD" in packed.upper():
            sent.loads.append(packed)
        return original(self, command, check_health)

    monkeypatch.setattr(connection_class, "send_packed_command", counting)
    return sent


def test_publisher_is_chosen_by_the_setting_at_call_time(settings):
    from accounting.release.eras import release_era

    settings.ACCOUNTING_SCHEDULER = "redis"
    assert isinstance(release_era().publisher, RedisReleasePublisher)
    settings.ACCOUNTING_SCHEDULER = "maestro"
    assert isinstance(release_era().publisher, NoopReleasePublisher)


def test_accounting_client_never_retries():
    client = accounting_redis()
    assert client.get_retry()._retries == 0
    connection = client.connection_pool.get_connection()
    try:
        assert connection.retry._retries == 0
        assert connection.retry_on_timeout is False
        assert connection.retry_on_error == []
    finally:
        client.connection_pool.release(connection)


def test_redis_stopped_at_publish_commits_logs_and_counts(
    farm, acct_redis, settings, fresh_accounting_client, caplog, django_capture_on_commit_callbacks
):
    proc = farm.add_proc(cores=200)
    names = seed_keys(acct_redis, farm, cores=2)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        unbook_proc(proc_id=proc.id)
    before = failures("publish")
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    accounting_redis.cache_clear()

    with caplog.at_level(logging.WARNING, logger="accounting.release.publish"):
        for callback in callbacks:
            callback()

    assert not Proc.objects.filter(pk=proc.id).exists()
    assert failures("publish") == before + 1
    [record] = [r for r in caplog.records if r.name == "accounting.release.publish"]
    assert record.levelno == logging.WARNING
    assert proc.id in record.getMessage() and farm.show.id in record.getMessage()
    # Redis stays high (safe); the in-flight entry keeps a reseed counting it until it expires.
    assert hashes(acct_redis, names) == {role: {"int_cores": "2", "int_gpus": "0"} for role in names}
    assert len(acct_redis.hgetall(keys.INFLIGHT)) == 1


def test_redis_stopped_at_prepare_commits_and_schedules_no_publish(
    farm, acct_redis, settings, fresh_accounting_client, caplog, django_capture_on_commit_callbacks
):
    proc = farm.add_proc(cores=200)
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    before = failures("prepare")

    with (
        caplog.at_level(logging.WARNING, logger="accounting.release.publish"),
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        release = unbook_proc(proc_id=proc.id)

    assert release is not None
    assert not Proc.objects.filter(pk=proc.id).exists()
    assert len(callbacks) == 1  # the metric only: nothing to publish without an in-flight entry
    assert failures("prepare") == before + 1
    assert any(proc.id in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_redis_hanging_times_out_once_and_the_late_script_applies_once(
    farm, acct_redis, settings, fresh_accounting_client, caplog, evalsha_sends, django_capture_on_commit_callbacks
):
    proc = farm.add_proc(cores=300, gpus=1)
    names = seed_keys(acct_redis, farm, cores=7, gpus=2)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        unbook_proc(proc_id=proc.id)
    assert acct_redis.get(keys.SEQ) == "1"
    settings.ACCOUNTING_REDIS_TIMEOUT = 0.2
    accounting_redis.cache_clear()
    accounting_redis().ping()  # connect now, so the timeout below is the script's
    evalsha_sends.clear()
    before = failures("publish")

    # Another client keeps Redis busy for 1.5 s: our script waits in its socket, the
    # client gives up after 0.2 s, and Redis runs the script once the busy one ends.
    blocker = redis.Redis.from_url(django_settings.ACCOUNTING_REDIS_URL)
    busy = threading.Thread(target=lambda: blocker.eval(BUSY_SCRIPT, 0, 1_500_000))
    busy.start()
    # 0.3 s unanswered: the busy script is running (a loaded machine delays a PING by far
    # less), with 1.2 s of it left for the release's 0.2 s timeout.
    probe = redis.Redis.from_url(django_settings.ACCOUNTING_REDIS_URL, socket_timeout=0.3)
    for _ in range(200):  # until a PING goes unanswered
        try:
            probe.ping()
        except redis.TimeoutError:
            break
    else:
        pytest.fail("Redis never became busy")

    with caplog.at_level(logging.WARNING, logger="accounting.release.publish"):
        for callback in callbacks:
            callback()
    busy.join()

    assert failures("publish") == before + 1
    assert any("TimeoutError" in r.getMessage() and proc.id in r.getMessage() for r in caplog.records)
    assert len(evalsha_sends) == 1  # sent once, never resent
    deadline = time.monotonic() + 5
    while acct_redis.get(keys.SEQ) != "2" and time.monotonic() < deadline:
        pass  # the late script lands as soon as Redis reads our closed socket
    assert acct_redis.get(keys.SEQ) == "2"
    assert hashes(acct_redis, names) == {role: {"int_cores": "4", "int_gpus": "1"} for role in names}
    assert acct_redis.hgetall(keys.INFLIGHT) == {}
    blocker.close()
    probe.close()

    # The timeout opened the breaker: until it closes, releases skip Redis (tested in
    # test_stalled_redis.py). Once closed, the next release goes through normally and
    # nothing of the first is applied again.
    assert breaker.is_open()
    breaker.close()
    other = farm.add_proc(cores=100)
    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=other.id)
    assert acct_redis.get(keys.SEQ) == "4"
    assert hashes(acct_redis, names) == {role: {"int_cores": "3", "int_gpus": "1"} for role in names}


def test_script_flush_reloads_and_publishes_once(farm, acct_redis, django_capture_on_commit_callbacks, evalsha_sends):
    first, second = farm.add_proc(cores=100), farm.add_proc(cores=200)
    names = seed_keys(acct_redis, farm, cores=10)
    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=first.id)
    acct_redis.script_flush()
    evalsha_sends.clear()

    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=second.id)

    assert hashes(acct_redis, names) == {role: {"int_cores": "7", "int_gpus": "0"} for role in names}
    assert acct_redis.get(keys.SEQ) == "4"
    # prepare and release: each refused once with NOSCRIPT (a load follows each refusal and
    # nothing else), loaded, then run once.
    assert (len(evalsha_sends), len(evalsha_sends.loads)) == (4, 2)


def stale() -> float:
    return REGISTRY.get_sample_value("cuebot_acct_release_publish_stale_total") or 0.0


def test_release_straddling_a_restart_is_not_decremented_twice(
    farm, acct_redis, django_capture_on_commit_callbacks, caplog
):
    """Prepared, then Redis restarts and the bootstrap rebuilds from SUM(proc), which no
    longer has the deleted proc; the publish must not take it off a second time."""
    farm.add_proc(cores=400)
    proc = farm.add_proc(cores=300, gpus=1)
    names = seed_keys(acct_redis, farm, cores=7, gpus=1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        unbook_proc(proc_id=proc.id)
    acct_redis.flushdb()  # the in-flight entry goes with it
    assert bootstrap_if_empty(wait=lambda seconds: None)
    assert hashes(acct_redis, names)["sub"]["int_cores"] == "4"
    stale_before = stale()

    with caplog.at_level(logging.WARNING, logger="accounting.release.publish"):
        for callback in callbacks:
            callback()

    for role, name in names.items():
        assert acct_redis.hmget(name, "int_cores", "int_gpus") == ["4", "0"], role  # SUM(proc), not 1
    assert acct_redis.hgetall(keys.INFLIGHT) == {}
    assert stale() == stale_before + 1
    assert any("in-flight entry gone" in r.getMessage() and proc.id in r.getMessage() for r in caplog.records)


def test_release_whose_entry_expired_changes_no_counter(farm, acct_redis, settings, django_capture_on_commit_callbacks):
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 0  # expired as soon as registered: control time, no sleep
    proc = farm.add_proc(cores=300)
    names = seed_keys(acct_redis, farm, cores=3)
    stale_before = stale()
    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=proc.id)
    assert stale() == stale_before + 1
    # A reseed may already have dropped the proc along with the expired entry: left high.
    assert hashes(acct_redis, names) == {role: {"int_cores": "3", "int_gpus": "0"} for role in names}
    assert acct_redis.hgetall(keys.INFLIGHT) == {}
    assert acct_redis.get(keys.SEQ) == "2"  # prepare, and the release that applied nothing


def test_a_release_with_a_live_entry_is_applied_and_not_counted_stale(
    farm, acct_redis, django_capture_on_commit_callbacks
):
    proc = farm.add_proc(cores=300)
    names = seed_keys(acct_redis, farm, cores=3)
    stale_before = stale()
    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=proc.id)
    assert hashes(acct_redis, names)["sub"]["int_cores"] == "0"
    assert stale() == stale_before


def clamped() -> float:
    return REGISTRY.get_sample_value("cuebot_acct_release_clamped_total") or 0.0


def test_a_release_that_finds_a_counter_below_it_keeps_it_at_0_and_says_so(
    farm, acct_redis, django_capture_on_commit_callbacks, caplog
):
    """Redis held less than a proc that still existed (low before the release): kept at 0,
    counted per counter and logged, never silent (the simulator's invariant reads it)."""
    proc = farm.add_proc(cores=300, gpus=1)
    names = seed_keys(acct_redis, farm, cores=3, gpus=1)
    acct_redis.hset(names["folder"], mapping={"int_cores": 1, "int_gpus": 0})  # low: 2 cores and a GPU short
    before = clamped()
    with (
        caplog.at_level(logging.WARNING, logger="accounting.release.publish"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        unbook_proc(proc_id=proc.id)
    assert hashes(acct_redis, names)["folder"] == {"int_cores": "0", "int_gpus": "0"}
    assert hashes(acct_redis, names)["sub"] == {"int_cores": "0", "int_gpus": "0"}  # exact: not counted
    assert clamped() == before + 2  # the folder's int_cores (1 - 3) and int_gpus (0 - 1)
    assert any("below what it took off" in r.getMessage() and proc.id in r.getMessage() for r in caplog.records)
