"""The periodic drift check: counts per show, exported as gauges, recorded for the admin."""

import pytest
from django.core.cache import cache
from django_q.tasks import async_task, result
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.operators.selectors import drift_status
from accounting.reconcile.drift_check import STATUS_KEY, run_drift_check
from accounting.reconcile.reseed import seed_show
from cuebot_acct.redis_factory import accounting_redis
from shows.models import Show
from tests.farms import build_farm
from tests.processes import closed_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]


def gauge(show: str) -> float | None:
    return REGISTRY.get_sample_value("cuebot_acct_drift_fields", {"show": show})


def test_counts_fields_per_show_and_exports_them(client, acct_redis):
    clean, drifted = build_farm(managed=True), build_farm(managed=True)
    build_farm(managed=False)
    for farm in (clean, drifted):
        farm.add_proc(cores=200)
        seed_show(show_id=farm.show.id)
    acct_redis.hset(keys.sub(show_id=drifted.show.id, alloc_id=drifted.alloc.id), "int_cores", 9)
    acct_redis.hset(keys.job(job_id=drifted.job.id), "int_max_cores", 1)

    check = run_drift_check()

    assert check.fields_drifted == {clean.show.str_name: 0, drifted.show.str_name: 2}
    assert (gauge(clean.show.str_name), gauge(drifted.show.str_name)) == (0, 2)
    assert REGISTRY.get_sample_value("cuebot_acct_drift_last_check_timestamp_seconds") == check.checked_at
    status = drift_status()
    assert status.shows[drifted.show.pk].fields == 2 and status.checked_at.timestamp() == pytest.approx(check.checked_at, abs=1e-3)
    scraped = client.get("/metrics").content.decode()
    assert f'cuebot_acct_drift_fields{{show="{drifted.show.str_name}"}} 2.0' in scraped


def test_a_show_moved_back_to_cuebot_drops_to_zero(acct_redis):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    acct_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores", 9)
    assert run_drift_check().fields_drifted == {farm.show.str_name: 1}
    Show.objects.filter(pk=farm.show.pk).update(b_scheduler_managed=False)
    assert run_drift_check().fields_drifted == {}
    assert gauge(farm.show.str_name) == 0


def test_a_redis_that_cannot_be_read_is_recorded_and_the_timestamp_kept(settings, acct_redis, fresh_accounting_client):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    first = run_drift_check()
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    accounting_redis.cache_clear()
    failed = run_drift_check()
    assert failed.error
    assert REGISTRY.get_sample_value("cuebot_acct_drift_last_check_timestamp_seconds") == first.checked_at
    status = drift_status()
    assert status.error and status.checked_at.timestamp() == pytest.approx(first.checked_at, abs=1e-3)


def test_the_task_runs_through_the_cluster(acct_redis):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    cache.delete(STATUS_KEY)
    assert result(async_task("accounting.tasks.drift_check_task")) == 0
    assert farm.show.pk in drift_status().shows
