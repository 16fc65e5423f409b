"""Locks, the scheduled reconciliation tasks and the limit API, on the real services."""

import time

import pytest

from accounting.live import keys
from accounting.live.leases import PREFIX, LockBusy, acquire, named_lock, release
from accounting.models import JobResource, Subscription
from accounting.reconcile import reseed as reseed_module
from accounting.reconcile.reseed import FARM_LOCK
from accounting.tasks import (
    check_empty_redis,
    reconcile_booked,
    reconcile_limits,
    watch_empty_redis,
)
from infra.permissions import CHANGE_LIMITS
from tests.accounting.pg import accounting_mismatches

pytestmark = pytest.mark.django_db


def sub_key(farm) -> str:
    return keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)


def test_dead_owner_lock_expires_and_non_owner_cannot_release(acct_redis):
    assert acquire(name="acct-reseed", ttl_seconds=30, owner="dead-worker")
    assert 0 < acct_redis.pttl(PREFIX + "acct-reseed") <= 30_000  # never held forever
    assert not release(name="acct-reseed", owner="someone-else")
    with pytest.raises(LockBusy), named_lock(name="acct-reseed", ttl_seconds=30):
        pass
    assert acct_redis.get(PREFIX + "acct-reseed") == "dead-worker"
    # The holder died: move its expiry into the past instead of waiting 30 s.
    acct_redis.pexpireat(PREFIX + "acct-reseed", int(time.time() * 1000) - 1)
    with named_lock(name="acct-reseed", ttl_seconds=30) as owner:
        assert acct_redis.get(PREFIX + "acct-reseed") == owner
    assert not acct_redis.exists(PREFIX + "acct-reseed")


def test_lock_released_on_error(acct_redis):
    with pytest.raises(RuntimeError), named_lock(name=FARM_LOCK, ttl_seconds=30):
        raise RuntimeError("reseed failed")
    assert not acct_redis.exists(PREFIX + FARM_LOCK)


def test_locks_endpoint(reader_client):
    assert acquire(name=FARM_LOCK, ttl_seconds=30, owner="worker-1")
    body = reader_client.get("/api/v1/locks").json()
    assert [(lock["name"], lock["owner"]) for lock in body] == [(FARM_LOCK, "worker-1")]
    assert 0 < body[0]["ttl_ms"] <= 30_000


def test_tasks_do_nothing_when_disabled(farm, acct_redis, settings):
    settings.ACCOUNTING_RECONCILE_ENABLED = False
    reconcile_booked()
    reconcile_limits()
    assert not check_empty_redis()
    assert acct_redis.keys("acct:*") == []


def test_tasks_reconcile_when_enabled(farm, seeded_redis, acct_redis, settings):
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    farm.add_proc(cores=250)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=0)  # CueGUI's view lagging
    reconcile_booked()
    assert acct_redis.hget(sub_key(farm), "int_cores") == "2" and not acct_redis.hexists(sub_key(farm), "burst")
    # The PG half of the recompute: the scheduler-managed show's tables equal SUM(proc) again.
    assert accounting_mismatches(show_id=farm.show.id) == []
    reconcile_limits()
    assert acct_redis.hget(sub_key(farm), "burst") == "200"


def test_empty_redis_watch_rebuilds_once(farm, acct_redis, settings, monkeypatch):
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    waits = []
    monkeypatch.setattr(reseed_module, "inflight_wait", waits.append)
    farm.add_proc(cores=400)
    watch_empty_redis(checks=3, interval_seconds=0)
    assert acct_redis.hmget(sub_key(farm), "int_cores", "burst") == ["4", "200"]
    acct_redis.flushdb()  # Redis restarted without persistence
    assert check_empty_redis()
    assert acct_redis.hmget(sub_key(farm), "int_cores", "burst") == ["4", "200"]
    assert waits == [settings.ACCOUNTING_INFLIGHT_TTL_SECONDS] * 2  # one in-flight wait per rebuild


def test_task_skips_while_another_reseed_holds_the_lock(farm, acct_redis, settings):
    settings.ACCOUNTING_RECONCILE_ENABLED = True
    assert acquire(name=FARM_LOCK, ttl_seconds=30, owner="other")
    reconcile_booked()
    assert not check_empty_redis()
    assert not acct_redis.exists(sub_key(farm))


@pytest.fixture
def token(token_with) -> str:
    return token_with(CHANGE_LIMITS)


def test_api_limit_change_needs_a_token(farm, client, acct_redis):
    response = client.patch(
        f"/api/v1/accounting/subscriptions/{farm.subscription.id}/limits", {"size": 5}, content_type="application/json"
    )
    assert response.status_code == 401
    assert Subscription.objects.get(pk=farm.subscription.pk).int_size == 10000


def test_api_limit_change_in_cores_reaches_redis(
    farm, client, seeded_redis, acct_redis, token, django_capture_on_commit_callbacks
):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.patch(
            f"/api/v1/accounting/subscriptions/{farm.subscription.id}/limits",
            {"burst": 300},
            content_type="application/json",
            **auth,
        )
        assert response.status_code == 200 and response.json()["limits"]["burst"] == 300, response.content
        response = client.patch(
            f"/api/v1/accounting/jobs/{farm.job.id}/limits",
            {"max_cores": 64, "priority": 9},
            content_type="application/json",
            **auth,
        )
        assert response.status_code == 200
        response = client.patch(
            f"/api/v1/accounting/folders/{farm.folder.id}/limits",
            {"max_gpus": 3},
            content_type="application/json",
            **auth,
        )
        assert response.status_code == 200
    assert acct_redis.hget(sub_key(farm), "burst") == "300"
    assert acct_redis.hmget(keys.job(job_id=farm.job.id), "int_max_cores", "int_priority") == ["64", "9"]
    assert acct_redis.hget(keys.folder(folder_id=farm.folder.id), "int_max_gpus") == "3"


@pytest.mark.parametrize(
    "path, payload, status",
    [
        ("subscriptions/{sub}/limits", {"size": -4}, 422),
        ("subscriptions/{sub}/limits", {"size": "many"}, 422),
        ("jobs/{job}/limits", {"max_gpus": -7}, 422),
        ("jobs/{job}/limits", {"max_cores": -1}, 422),  # -1 is no "unlimited" for a job's max in Cuebot
        ("subscriptions/{sub}/limits", {"burst": -1}, 422),
        ("jobs/nosuchjob/limits", {"max_cores": 5}, 404),
    ],
)
def test_api_bad_limit_input(farm, client, acct_redis, token, path, payload, status):
    url = "/api/v1/accounting/" + path.format(sub=farm.subscription.id, job=farm.job.id)
    response = client.patch(url, payload, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == status and "detail" in response.json()
    assert Subscription.objects.filter(pk=farm.subscription.pk, int_size=10000).exists()
    assert JobResource.objects.get(pk=farm.job.resource.pk).int_max_gpus == 100
    assert acct_redis.keys("acct:*") == []
