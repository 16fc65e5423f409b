"""Sentinel: URLs, the cache on django-redis's Sentinel support, and a master killed under
load on a real topology (one master, one replica, three sentinels on loopback ports)."""

import threading
import time
from collections import Counter

import pytest
import redis
from django.db import connection

from accounting.live import keys
from accounting.models import Proc
from accounting.reconcile.failover import check_master, watch_master
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.reseed import bootstrap_if_empty, reseed_booked
from accounting.reconcile.snapshot import booked_rows
from accounting.release import publish as publisher
from accounting.release.unbook import unbook_proc
from infra.metrics import counter_total
from infra.redis_factory import (
    BadRedisUrl,
    accounting_redis,
    django_cache,
    master_address,
    sentinel_target,
)
from shows.flag_tracking import TrackedKeys
from simulator.workers.redis.reseeding import inflight_keys_pending
from tests.farms import build_farm
from tests.redis_topology import await_true, sentinel_topology
from tests.service_role import as_cuebot


def test_sentinel_url_parts():
    target = sentinel_target("redis+sentinel://:s%40cret@10.0.0.1:26379,10.0.0.2:26380,sentinel-c/acct/3")
    assert target.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("sentinel-c", 26379))
    assert (target.master_name, target.db, target.password) == ("acct", 3, "s@cret")
    assert sentinel_target("redis+sentinel://h:1/acct").db == 0
    assert sentinel_target("redis://127.0.0.1:6379/0") is None


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel:///acct/0",
        "redis+sentinel://h:1/",
        "redis+sentinel://h:x/acct/0",
        "redis+sentinel://h:1/acct/zero",
    ],
)
def test_malformed_sentinel_url_is_refused_with_the_expected_form(url):
    with pytest.raises(BadRedisUrl, match="redis\\+sentinel"):
        sentinel_target(url)


@pytest.mark.parametrize("setting", ["ACCOUNTING_REDIS_URL", "CACHE_REDIS_URL", "TASK_BROKER_REDIS_URL"])
def test_a_malformed_sentinel_url_stops_the_process_with_its_name(setting):
    from tests.processes import manage

    done = manage("check", **{setting: "redis+sentinel://sentinel-a:x/acct/0"})
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()  # every entry point: tests/infra/test_bad_settings.py
    assert line.startswith(
        f"cuebot-acct: {setting} is 'redis+sentinel://sentinel-a:x/acct/0': sentinel 'sentinel-a:x' "
        "is not host:port; accepted: "
    )


@pytest.fixture(scope="module")
def topology():
    with sentinel_topology(replicas=1) as running:
        yield running


def test_cache_and_broker_run_on_django_redis_sentinel_support(topology):
    from django_redis.cache import RedisCache

    entry = django_cache(url=topology.url(1), options={"CLIENT_CLASS": "django_redis.client.DefaultClient"})
    assert entry["OPTIONS"]["CONNECTION_FACTORY"] == "infra.redis_factory.DjangoRedisSentinelConnectionFactory"
    cache = RedisCache(entry["LOCATION"], {"OPTIONS": entry["OPTIONS"]})
    cache.set("sentinel-probe", 42)
    assert cache.get("sentinel-probe") == 42
    pool = cache.client.get_client().connection_pool
    assert pool.connection_kwargs["retry"]._retries == 0  # never resend
    assert pool.service_name == "acct-test"


@pytest.fixture
def sentinel_accounting(settings, topology):
    """The accounting Redis is the topology's master, found through its sentinels."""
    settings.ACCOUNTING_REDIS_URL = topology.url(0)
    settings.ACCOUNTING_REDIS_TIMEOUT = 0.5
    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 2
    accounting_redis.cache_clear()
    yield topology
    accounting_redis.cache_clear()


PROCS = 240


def redis_counters(client, wanted: list[str]) -> dict[str, tuple[int, int]]:
    with client.pipeline(transaction=False) as pipe:
        for key in wanted:
            pipe.hmget(key, "int_cores", "int_gpus")
        return {key: (int(c or 0), int(g or 0)) for key, (c, g) in zip(wanted, pipe.execute())}


@pytest.mark.django_db(transaction=True)
def test_master_killed_under_releases_is_rebuilt_and_never_reads_low(sentinel_accounting, monkeypatch, client):
    topology = sentinel_accounting
    farm = build_farm(managed=True, size=100000, burst=100000, host_cores=40000)
    for _ in range(PROCS):
        farm.add_proc(cores=100)
    assert bootstrap_if_empty(wait=lambda seconds: None)
    acct = accounting_redis()
    assert acct.get(keys.MASTER).decode() == acct.info("replication")["master_replid"]
    assert client.get("/healthz").json()["accounting_redis"]["master"] == f"127.0.0.1:{topology.master.port}"
    farm_keys = [key for key, *_ in booked_rows(show_ids=[farm.show.id])]

    published: list[float] = []
    real_publish = publisher.RedisReleasePublisher.publish

    def timed_publish(self, *, prepared):
        seq = real_publish(self, prepared=prepared)
        if seq is not None:
            published.append(time.monotonic())
        return seq

    monkeypatch.setattr(publisher.RedisReleasePublisher, "publish", timed_publish)
    stop, errors, low, samples = threading.Event(), [], [], Counter()
    released: list[str] = []
    to_release = [p.pk for p in farm.procs]
    take = threading.Lock()

    def guarded(body):
        def run():
            try:
                body()
            except Exception as error:  # noqa: BLE001 - reported by the assertions below
                errors.append(repr(error))
            finally:
                connection.close()

        return threading.Thread(target=run, daemon=True)

    def releaser():
        while not stop.wait(0.08):
            with take:
                if not to_release:
                    return
                proc_id = to_release.pop()
            if unbook_proc(proc_id=proc_id) is None:
                raise AssertionError(f"proc {proc_id} was not released")
            released.append(proc_id)

    def sampler():
        # Redis first, then PostgreSQL: with only releases running, PG can only have moved
        # down in between, so a Redis value below the PG one is really low.
        while not stop.wait(0.05):
            try:
                in_redis = redis_counters(accounting_redis(), farm_keys)
            except Exception:  # noqa: BLE001 - no master right now: no sample
                samples["skipped"] += 1
                continue
            in_pg = {key: (cores, gpus) for key, cores, gpus, _ in booked_rows(show_ids=[farm.show.id])}
            for key, (cores, gpus) in in_pg.items():
                if in_redis[key][0] < cores or in_redis[key][1] < gpus:
                    low.append((key, in_redis[key], (cores, gpus)))
            samples["taken"] += 1

    watcher_stop = threading.Event()
    threads = [
        guarded(releaser),
        guarded(releaser),
        guarded(sampler),
        guarded(lambda: watch_master(stop=watcher_stop, interval=0.2)),
    ]
    rebuilds_before = counter_total("cuebot_acct_redis_rebuilds_total")
    failovers_before = counter_total("cuebot_acct_redis_failovers_total")
    try:
        for thread in threads:
            thread.start()
        await_true(lambda: len(released) >= 15, timeout=10, what="releases before the kill")
        killed_at = time.monotonic()
        topology.master.kill()
        first_publish = await_true(
            lambda: next((t for t in published if t > killed_at), None),
            timeout=20,
            what="a release published to the new master",
        )
        await_true(
            lambda: counter_total("cuebot_acct_redis_rebuilds_total") > rebuilds_before,
            timeout=20,
            what="the rebuild after the failover",
        )
        rebuilt_at = time.monotonic()
        settled = len(released)
        await_true(
            lambda: len(released) >= settled + 10 or not to_release, timeout=10, what="releases after the rebuild"
        )
    finally:
        stop.set()
        watcher_stop.set()
        for thread in threads:
            thread.join(15)
    print(
        f"\nmaster killed -> first successful publish {first_publish - killed_at:.2f} s, "
        f"-> rebuild finished {rebuilt_at - killed_at:.2f} s; {len(released)} releases, {dict(samples)} samples"
    )

    assert errors == []
    assert low == []
    assert samples["taken"] > 20
    assert first_publish - killed_at < 10
    assert not Proc.objects.filter(pk__in=released).exists()  # every release committed
    assert Proc.objects.filter(show=farm.show).count() == PROCS - len(released)
    new_master = master_address(accounting_redis())
    assert new_master != f"127.0.0.1:{topology.master.port}"
    # Right after: nothing low. A call that timed out after its script ran (a release
    # registered but never published) may leave a key high until the next reseed heals it.
    after_rebuild = drift_report(show_ids=[farm.show.id]).rows
    print(f"drift right after the load stopped: {len(after_rebuild)} field(s), all high")
    assert all(row.difference > 0 for row in after_rebuild)
    if after_rebuild:
        await_true(lambda: not inflight_keys_pending(), timeout=5, what="in-flight entries to expire")
        assert reseed_booked(show_ids=[farm.show.id]).written
    assert drift_report(show_ids=[farm.show.id]).rows == []
    assert counter_total("cuebot_acct_redis_failovers_total") == failovers_before + 1
    health = client.get("/healthz").json()["accounting_redis"]
    assert health["master"] == new_master and health["failovers"] >= 1 and health["rebuilds"] >= 1
    assert f'cuebot_acct_redis_master{{address="{new_master}"}} 1.0' in client.get("/metrics").content.decode()
    assert not check_master().failover  # the rebuilt master is the recorded one now


@pytest.mark.django_db
def test_a_new_master_closes_the_managed_keys_and_rebuilds_them_before_anything_books(farm, acct_redis, settings):
    """A promoted replica carries its old master's acct:master but has a new replication id:
    booking.lua refuses it at once, then the keys are closed (as on an empty Redis) through
    the in-flight wait and rebuilt, whatever ACCOUNTING_RECONCILE_ENABLED says."""
    from accounting.live.booking import book
    from tests.accounting.live.test_booking import ids

    settings.ACCOUNTING_RECONCILE_ENABLED = False
    farm.add_proc(cores=300)
    assert bootstrap_if_empty(wait=lambda seconds: None)
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    acct_redis.set(keys.MASTER, "replication-id-of-the-old-master")
    acct_redis.hset(sub, "int_cores", 1)  # the replica missed the last bookings: it reads low
    refused = book(**ids(farm), cores=100, gpus=0)  # before anything noticed the new master
    assert not refused.ok and refused.table == "failover"
    during_wait = {}

    def inflight_wait(seconds: float) -> None:
        during_wait["seeded"] = acct_redis.exists(keys.SEEDED)
        during_wait["burst"] = acct_redis.hget(sub, "burst")
        during_wait["booking"] = book(**ids(farm), cores=100, gpus=0)

    failovers = counter_total("cuebot_acct_redis_failovers_total")
    result = check_master(wait=inflight_wait)
    assert result.failover and result.rebuilt
    assert during_wait["seeded"] == 0 and during_wait["burst"] is None
    assert not during_wait["booking"].ok and during_wait["booking"].table == "subscription"
    assert acct_redis.hget(sub, "int_cores") == "3" and acct_redis.hget(sub, "burst") == "200"
    assert acct_redis.get(keys.MASTER) == acct_redis.info("replication")["master_replid"]
    assert counter_total("cuebot_acct_redis_failovers_total") == failovers + 1
    assert not check_master().failover
    assert drift_report(show_ids=[farm.show.id]).rows == []


@pytest.mark.django_db
def test_a_redis_the_scheduler_rebuilt_is_adopted_and_its_failover_still_noticed(farm, acct_redis):
    """The scheduler's bootstrap sets neither acct:seeded nor acct:master: the first check
    records the server, so a later promotion is still told apart."""
    acct_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), mapping={"int_cores": 0, "burst": 200})
    assert not check_master().failover
    assert acct_redis.get(keys.MASTER) == acct_redis.info("replication")["master_replid"]
    acct_redis.set(keys.MASTER, "replication-id-of-the-old-master")
    assert check_master(wait=lambda seconds: None).failover
    assert acct_redis.get(keys.SEEDED) == keys.SEEDED_VALUE


@pytest.mark.slow
@pytest.mark.superuser  # simulate_farm books as the scheduler (INSERT on proc)
@pytest.mark.django_db(transaction=True)
def test_simulated_farm_keeps_every_invariant_through_a_failover(settings):
    """simulate_farm's failover fault: a sentinel promotes the replica while bookers, releasers
    and the operator run; the reconciler's master check (what each task worker's watch does)
    closes and rebuilds the keys, and the quiet samples never see a counter below SUM(proc)."""
    import json
    from io import StringIO

    from django.core.management import CommandError, call_command

    with sentinel_topology(replicas=1) as own:
        settings.ACCOUNTING_REDIS_URL = own.url(0)
        accounting_redis.cache_clear()
        try:
            out = StringIO()
            try:
                call_command(
                    "simulate_farm",
                    "--seconds",
                    "12",
                    "--faults",
                    "failover,slow-commit,crash-after-lua",
                    "--seed",
                    "4",
                    "--shows",
                    "2",
                    "--hosts",
                    "10",
                    "--jobs",
                    "10",
                    "--json",
                    stdout=out,
                    stderr=StringIO(),
                )
            except CommandError:
                pass  # an invariant failed: the report below says which
        finally:
            accounting_redis.cache_clear()
    report = json.loads(out.getvalue())
    print(f"\nsimulated failover: {report['faults']}, {report['reseed']}, Redis errors {report['redis_errors']}")
    assert report["invariants"] == {key: 0 for key in report["invariants"]}, report
    assert report["faults"]["failover"] == 1
    assert report["reseed"]["failovers"] == 1  # and rebuilt: no drift after the final reconcile
    assert report["bookings"] > 0 and report["releases"] > 0


@pytest.mark.django_db
def test_the_failover_fault_needs_a_sentinel_url():
    from io import StringIO

    from django.core.management import CommandError, call_command

    # As a role that may book (the simulator plays the scheduler); this refusal comes next.
    with pytest.raises(CommandError, match="redis\\+sentinel") as raised, as_cuebot():
        call_command("simulate_farm", "--faults", "failover", stdout=StringIO(), stderr=StringIO())
    assert raised.value.returncode == 2


@pytest.mark.django_db
def test_acct_reseed_rebuilds_a_new_master_nothing_noticed(farm, seeded_redis, settings, capsys):
    """No task cluster ran the watch: the operator's reseed closes and rebuilds first, which
    lifts booking.lua's refusal."""
    from django.core.management import call_command

    settings.ACCOUNTING_INFLIGHT_TTL_SECONDS = 0
    seeded_redis.set(keys.MASTER, "replication-id-of-the-old-master")
    call_command("acct_reseed")
    assert "new master: managed keys closed and rebuilt" in capsys.readouterr().out
    assert seeded_redis.get(keys.MASTER) == seeded_redis.info("replication")["master_replid"]
    assert seeded_redis.get(keys.SEEDED) == keys.SEEDED_VALUE


def test_the_show_flag_tracker_follows_a_sentinel_cache_url_to_its_master(topology):
    tracker = TrackedKeys(url=topology.url(1), prefix="show:", ttl_seconds=30)
    read = []
    assert tracker.get_many(["show:probe"], lambda keys: read.extend(keys) or {}) == {}
    assert read == ["show:probe"]
    assert tracker.client_id is not None  # the invalidation channel is up, on the master
    with redis.Redis(port=topology.master_port()) as master:
        tracking = [c for c in master.client_list() if int(c["id"]) == tracker.client_id]
    assert tracking and "t" in tracking[0]["flags"]
