"""The periodic drift check: counts per show, exported as gauges, recorded for the admin."""

import pytest
from django.core.cache import cache
from django_q.tasks import async_task, result
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.operators.drift_views import drift_status
from accounting.reconcile.drift_check import STATUS_KEY, TABLES_STATUS_KEY, run_drift_check, run_table_drift_check
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
    assert status.shows[drifted.show.pk].fields == 2 and status.checked_at.timestamp() == pytest.approx(
        check.checked_at, abs=1e-3
    )
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


def table_gauge(show: str) -> float | None:
    return REGISTRY.get_sample_value("cuebot_acct_cuebot_table_drift_rows", {"show": show})


def test_maestro_era_checks_cuebots_tables_of_every_show_without_redis(maestro_era, client):
    """The scheduled task, as the task cluster runs it, with the accounting Redis unreachable."""
    from django.db import connection

    from accounting.tasks import drift_check_task
    from tests.service_role import as_cuebot

    flagged, unflagged = build_farm(managed=True), build_farm(managed=False)
    flagged.add_proc(cores=200)
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute("UPDATE subscription SET int_cores = 0 WHERE pk_subscription = %s", [flagged.subscription.id])
        cursor.execute("UPDATE point SET int_gpus = 2 WHERE pk_show = %s", [flagged.show.id])

    assert drift_check_task() == 1

    assert (table_gauge(flagged.show.str_name), table_gauge(unflagged.show.str_name)) == (2, 0)
    checked = REGISTRY.get_sample_value("cuebot_acct_cuebot_table_drift_last_check_timestamp_seconds")
    assert checked == cache.get(TABLES_STATUS_KEY)["checked_at"]
    scraped = client.get("/metrics").content.decode()
    assert f'cuebot_acct_cuebot_table_drift_rows{{show="{flagged.show.str_name}"}} 2.0' in scraped
    # Redis era: the flagged show is the scheduler's, its gauge goes to 0 rather than stay stale.
    maestro_era.ACCOUNTING_REDIS_ENABLED = True
    assert run_table_drift_check().rows_drifted == {unflagged.show.str_name: 0}
    assert table_gauge(flagged.show.str_name) == 0
