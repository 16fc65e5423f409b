"""The periodic drift check: counts per show, exported as gauges, recorded for the admin."""

import logging

import pytest
from django.core.cache import cache
from django_q.tasks import async_task, result
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.reconcile.drift_check import check_status, run_check, status_key
from accounting.reconcile.redis_against_pg import REDIS_FIELDS
from accounting.reconcile.reseed import seed_show
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES
from infra.redis_factory import accounting_redis
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

    check = run_check(REDIS_FIELDS)

    assert check.drifted == {clean.show.str_name: 0, drifted.show.str_name: 2}
    assert (gauge(clean.show.str_name), gauge(drifted.show.str_name)) == (0, 2)
    assert REGISTRY.get_sample_value("cuebot_acct_drift_last_check_timestamp_seconds") == check.checked_at
    status = check_status(REDIS_FIELDS)
    assert status.shows[drifted.show.pk].drifted == 2 and status.checked_at.timestamp() == pytest.approx(
        check.checked_at, abs=1e-3
    )
    scraped = client.get("/metrics").content.decode()
    assert f'cuebot_acct_drift_fields{{show="{drifted.show.str_name}"}} 2.0' in scraped


def test_a_show_moved_back_to_cuebot_drops_to_zero(acct_redis):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    acct_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores", 9)
    assert run_check(REDIS_FIELDS).drifted == {farm.show.str_name: 1}
    Show.objects.filter(pk=farm.show.pk).update(b_scheduler_managed=False)
    assert run_check(REDIS_FIELDS).drifted == {}
    assert gauge(farm.show.str_name) == 0


def test_a_redis_that_cannot_be_read_is_recorded_and_the_timestamp_kept(settings, acct_redis, fresh_accounting_client):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    first = run_check(REDIS_FIELDS)
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    accounting_redis.cache_clear()
    failed = run_check(REDIS_FIELDS)
    assert failed.error
    assert REGISTRY.get_sample_value("cuebot_acct_drift_last_check_timestamp_seconds") == first.checked_at
    status = check_status(REDIS_FIELDS)
    assert status.error and status.checked_at.timestamp() == pytest.approx(first.checked_at, abs=1e-3)


def test_the_task_runs_through_the_cluster(acct_redis):
    farm = build_farm(managed=True)
    seed_show(show_id=farm.show.id)
    cache.delete(status_key(REDIS_FIELDS))
    assert result(async_task("accounting.tasks.drift_check_task")) == 0
    assert farm.show.pk in check_status(REDIS_FIELDS).shows


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
    assert checked == cache.get(status_key(CUEBOT_TABLES))["checked_at"]
    scraped = client.get("/metrics").content.decode()
    assert f'cuebot_acct_cuebot_table_drift_rows{{show="{flagged.show.str_name}"}} 2.0' in scraped
    # Redis era: the flagged show is the scheduler's, its gauge goes to 0 rather than stay stale.
    maestro_era.ACCOUNTING_SCHEDULER = "redis"
    assert run_check(CUEBOT_TABLES).drifted == {unflagged.show.str_name: 0}
    assert table_gauge(flagged.show.str_name) == 0


def test_drift_in_many_shows_is_one_line_naming_the_worst_few_and_the_count(maestro_era, caplog):
    """Issue 49: 500 rows drifted across 180 shows made one WARNING of 5,000 characters a check."""
    from django.db import connection

    from accounting.reconcile.drift_check import WORST_NAMED
    from tests.service_role import as_cuebot

    tables = ("subscription", "layer_resource", "job_resource", "folder_resource", "point")
    farms = [build_farm(managed=False) for _ in range(3 * WORST_NAMED)]
    drifted = {}
    with as_cuebot(), connection.cursor() as cursor:
        for n, farm in enumerate(farms):
            keys_of = {"layer_resource": farm.layer.id, "job_resource": farm.job.id, "folder_resource": farm.folder.id}
            for table in tables[: 1 + n % len(tables)]:
                column = {"layer_resource": "pk_layer", "job_resource": "pk_job", "folder_resource": "pk_folder"}
                key = (column.get(table, "pk_show"), keys_of.get(table, farm.show.id))
                cursor.execute(f"UPDATE {table} SET int_gpus = int_gpus + 1 WHERE {key[0]} = %s", [key[1]])
            drifted[farm.show.str_name] = 1 + n % len(tables)

    with caplog.at_level(logging.WARNING, logger="accounting.reconcile.drift_check"):
        run_check(CUEBOT_TABLES)

    (line,) = [record.getMessage() for record in caplog.records]
    worst = sorted(drifted, key=lambda name: (-drifted[name], name))
    assert f"in {len(farms)} show(s): " in line and f"and {len(farms) - WORST_NAMED} more" in line
    assert all(f"{name} ({drifted[name]} rows)" in line for name in worst[:WORST_NAMED])
    assert not any(name in line for name in worst[WORST_NAMED:])
    assert "manage.py acct_drift" in line and len(line) < 400


def test_a_check_of_cuebots_tables_that_cannot_read_records_the_error_and_keeps_its_time(maestro_era):
    """Errors are recorded for every source: a read PostgreSQL refuses (here a grant taken away, in
    the test's transaction) leaves the last check's time and records as they were, and says why."""
    from django.db import connection

    from tests.service_role import STATE, as_cuebot

    farm = build_farm(managed=False)
    first = run_check(CUEBOT_TABLES)
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(f"REVOKE SELECT ON subscription FROM {STATE.role}")
    failed = run_check(CUEBOT_TABLES)
    assert failed.error and failed.drifted == {}
    status = check_status(CUEBOT_TABLES)
    assert status.error.startswith("ProgrammingError: ") and "permission denied" in status.error
    assert status.checked_at.timestamp() == pytest.approx(first.checked_at, abs=1e-3)
    assert status.drifted(farm.show.pk) == 0
    last = REGISTRY.get_sample_value("cuebot_acct_cuebot_table_drift_last_check_timestamp_seconds")
    assert last == first.checked_at
