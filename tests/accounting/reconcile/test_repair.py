"""The repair of Cuebot's five tables: the drifted rows alone written and named, exact beside a
release or another repair that writes a row between the read and its lock; the farm-wide repair
reads without a list of shows; the statements it sends."""

from collections.abc import Callable
from typing import Any, cast

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from prometheus_client import REGISTRY

from accounting.models import LayerResource
from accounting.reconcile.recompute import Repair, recompute_pg_accounting, repair_pg_accounting
from accounting.reconcile.recompute_sql import TABLES
from infra.metrics import RECOMPUTED_TABLES
from simulator.pg_truth import mismatches
from tests.farms import Farm, build_farm
from tests.infra.test_transactions import behind_cuebot
from tests.service_role import as_cuebot

ROWS = (
    ("subscription", "pk_subscription = %(subscription)s"),
    ("layer_resource", "pk_layer = %(layer)s"),
    ("job_resource", "pk_job = %(job)s"),
    ("folder_resource", "pk_folder = %(folder)s"),
    ("point", "pk_show = %(show)s AND pk_dept = %(dept)s"),
)


def versions(farm: Farm) -> dict[str, str]:
    """Each of the farm's five rows' ctid: a row written gets a new one."""
    found = {}
    with connection.cursor() as cursor:
        for table, where in ROWS:
            cursor.execute(f"SELECT ctid::text FROM {table} WHERE {where}", farm_keys(farm))
            found[table] = cursor.fetchone()[0]
    return found


def set_as_cuebot(sql: str, *params) -> None:
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(sql, list(params))


@pytest.mark.django_db
def test_a_repair_writes_the_drifted_rows_alone_and_names_each():
    farm = build_farm(managed=False)
    farm.add_proc(cores=300, gpus=1)
    set_as_cuebot("UPDATE layer_resource SET int_cores = 7 WHERE pk_layer = %s", farm.layer.id)
    set_as_cuebot("UPDATE point SET int_gpus = 4 WHERE pk_show = %s", farm.show.id)
    before = versions(farm)

    repair = repair_pg_accounting(show_ids=[farm.show.id])

    assert [(r.table, r.name, r.stored_cores, r.true_cores, r.stored_gpus, r.true_gpus) for r in repair.drifted] == [
        ("layer_resource", f"{farm.job.str_name} / {farm.layer.str_name}", 7, 300, 1, 1),
        ("point", f"{farm.show.str_name} / {farm.dept.str_name}", 300, 300, 4, 1),
    ]
    assert repair.failures == []
    after = versions(farm)
    assert [table for table in after if after[table] != before[table]] == ["layer_resource", "point"]
    assert mismatches(show_id=farm.show.id) == []


def repair_beside(*, farm: Farm, writes: Callable[[Any], None]) -> Repair:
    """A repair of the farm's show that reads while Cuebot's transaction has run `writes` and holds
    its rows, waits for their locks, and goes on once that transaction commits."""
    return cast(Repair, behind_cuebot(holds=writes, waiter=lambda: repair_pg_accounting(show_ids=[farm.show.id])))


def farm_keys(farm: Farm) -> dict[str, str]:
    return {
        "subscription": farm.subscription.pk,
        "layer": farm.layer.pk,
        "job": farm.job.pk,
        "folder": farm.folder.pk,
        "show": farm.show.pk,
        "dept": farm.dept.pk,
    }


@pytest.mark.django_db(transaction=True)
def test_a_release_committing_between_the_read_and_the_lock_is_counted_once():
    """Cuebot releases a proc while the repair has read the layer row as drifted and waits for its
    lock: the row it read has changed, so it is recomputed from its sums once the lock is held.
    Set to the sum it read, it would count the released proc again."""
    farm = build_farm(managed=False)
    farm.add_proc(cores=100)
    released = farm.add_proc(cores=200)
    set_as_cuebot("UPDATE layer_resource SET int_cores = int_cores + 500 WHERE pk_layer = %s", farm.layer.id)

    def release(cursor) -> None:
        cursor.execute("DELETE FROM proc WHERE pk_proc = %s", [released.id])
        cursor.execute("UPDATE host SET int_cores_idle = int_cores_idle + 200 WHERE pk_host = %s", [farm.host.id])
        for table, where in ROWS:
            cursor.execute(f"UPDATE {table} SET int_cores = int_cores - 200 WHERE {where}", farm_keys(farm))

    repair = repair_beside(farm=farm, writes=release)

    assert [(r.table, r.stored_cores, r.true_cores) for r in repair.drifted] == [("layer_resource", 800, 300)]
    assert LayerResource.objects.get(layer=farm.layer).int_cores == 100
    assert mismatches(show_id=farm.show.id) == []


@pytest.mark.django_db(transaction=True)
def test_a_row_another_repair_set_between_the_read_and_the_lock_is_not_corrected_twice():
    """Two repairs at once (the periodic one and an operator's, say): the other sets the drifted
    layer row while this one waits for its lock. Corrected by the drift it read, the row would end
    that drift below its procs."""
    farm = build_farm(managed=False)
    farm.add_proc(cores=300)
    set_as_cuebot("UPDATE layer_resource SET int_cores = 800 WHERE pk_layer = %s", farm.layer.id)

    def other_repair(cursor) -> None:
        cursor.execute("UPDATE layer_resource SET int_cores = 300 WHERE pk_layer = %s", [farm.layer.id])

    repair = repair_beside(farm=farm, writes=other_repair)

    assert [(r.table, r.stored_cores, r.true_cores) for r in repair.drifted] == [("layer_resource", 800, 300)]
    assert LayerResource.objects.get(layer=farm.layer).int_cores == 300
    assert mismatches(show_id=farm.show.id) == []


@pytest.mark.django_db
def test_the_repair_of_every_show_reads_without_a_list_of_them():
    """Every show named: each proc is read without testing it against an array of every show."""
    first, second = build_farm(managed=False), build_farm(managed=True)
    for farm in (first, second):
        farm.add_proc(cores=100)
    set_as_cuebot("UPDATE job_resource SET int_cores = 0 WHERE pk_job = %s", second.job.id)

    def reads_naming(show_ids: list[str]) -> list[bool]:
        with CaptureQueriesContext(connection) as captured:
            failures = recompute_pg_accounting(show_ids=show_ids)
        assert failures == []
        return [first.show.id in query["sql"] for query in captured.captured_queries if "FROM proc p" in query["sql"]]

    assert reads_naming([first.show.id, second.show.id]) == [False] * 5
    assert mismatches(show_id=second.show.id) == []
    set_as_cuebot("UPDATE job_resource SET int_cores = 0 WHERE pk_job = %s", first.job.id)
    assert reads_naming([first.show.id]) == [True] * 5
    assert mismatches(show_id=first.show.id) == []


def statement_kind(sql: str) -> str:
    for prefix, kind in (("SAVEPOINT", "savepoint"), ("RELEASE", "release"), ("SELECT set_config", "prepare")):
        if sql.startswith(prefix):
            return kind
    if "FROM proc p" in sql:
        return "read"
    return "lock" if "FOR NO KEY UPDATE" in sql else "correct" if sql.lstrip().startswith("UPDATE") else sql


@pytest.mark.django_db
def test_a_repair_sends_a_read_per_table_and_a_lock_and_a_correction_per_drifted_table():
    """No savepoint per table (nor per row) unless a row is refused: the repair's own savepoint
    here is the test's transaction around it."""
    farm = build_farm(managed=False)
    farm.add_proc(cores=300)
    set_as_cuebot("UPDATE layer_resource SET int_cores = 7 WHERE pk_layer = %s", farm.layer.id)
    set_as_cuebot("UPDATE point SET int_gpus = 4 WHERE pk_show = %s", farm.show.id)

    with CaptureQueriesContext(connection) as captured:
        repair = repair_pg_accounting(show_ids=[farm.show.id])

    assert [statement_kind(query["sql"]) for query in captured.captured_queries] == [
        "savepoint",
        "prepare",
        "read",  # subscription
        "read",  # layer_resource
        "lock",
        "correct",
        "read",  # job_resource
        "read",  # folder_resource
        "read",  # point
        "lock",
        "correct",
        "release",
    ]
    assert [row.table for row in repair.drifted] == ["layer_resource", "point"]
    assert mismatches(show_id=farm.show.id) == []


def repairs_counted() -> float:
    return REGISTRY.get_sample_value("cuebot_acct_table_repairs_total") or 0.0


@pytest.mark.django_db
def test_an_operator_s_repair_that_sets_a_row_is_counted_and_no_other_recompute_is():
    """cuebot_acct_table_repairs_total marks repairs on the dashboard: acct_reseed's and the admin's
    (repair_pg_accounting), once each when a row was set; not one that found nothing, nor the
    recompute of a switch back or of the Redis era's reconcile (recompute_pg_accounting)."""
    farm = build_farm(managed=False)
    farm.add_proc(cores=300)
    before = repairs_counted()
    set_as_cuebot("UPDATE layer_resource SET int_cores = 7 WHERE pk_layer = %s", farm.layer.id)
    assert recompute_pg_accounting(show_ids=[farm.show.id]) == []
    assert repair_pg_accounting(show_ids=[farm.show.id]).drifted == []
    assert repairs_counted() == before
    set_as_cuebot("UPDATE layer_resource SET int_cores = 7 WHERE pk_layer = %s", farm.layer.id)
    assert repair_pg_accounting(show_ids=[farm.show.id]).drifted
    assert repairs_counted() == before + 1


def test_every_table_a_recompute_sets_has_its_failure_series_from_the_start():
    """The alert on their increase (CuebotAcctRecomputeRowsFailing) sees a table's first failure."""
    assert set(RECOMPUTED_TABLES) == {table.table for table in TABLES}
    for table in TABLES:
        assert REGISTRY.get_sample_value("cuebot_acct_recompute_row_failures_total", {"table": table.table}) is not None
