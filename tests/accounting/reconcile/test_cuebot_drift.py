"""Cuebot's own tables against SUM(proc): which rows the selector names, per era."""
import pytest
from django.db import connection

from accounting.reconcile.cuebot_drift import cuebot_table_drift, signed_cores
from tests.farms import build_farm
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db


def set_as_cuebot(sql: str, *params) -> None:
    """Drift made by hand, as Cuebot's own role could leave it."""
    with as_cuebot(), connection.cursor() as cursor:
        cursor.execute(sql, list(params))


@pytest.fixture
def drifted_farms():
    """A flagged show whose folder and subscription drifted, an unflagged one whose layer did."""
    flagged, unflagged = build_farm(managed=True), build_farm(managed=False)
    flagged.add_proc(cores=250, gpus=1)
    flagged.add_proc(cores=100, local=True)
    unflagged.add_proc(cores=300)
    set_as_cuebot("UPDATE folder_resource SET int_cores = int_cores + 150 WHERE pk_folder = %s", flagged.folder.id)
    set_as_cuebot("UPDATE subscription SET int_cores = 0, int_gpus = 3 WHERE pk_subscription = %s", flagged.subscription.id)
    set_as_cuebot("UPDATE layer_resource SET int_cores = 1 WHERE pk_layer = %s", unflagged.layer.id)
    return flagged, unflagged


def test_names_every_drifted_row_of_every_show_in_the_maestro_era(maestro_era, drifted_farms):
    flagged, unflagged = drifted_farms
    report = cuebot_table_drift()
    assert report.drifted and report.shows == 2
    assert [(r.table, r.name, r.stored_cores, r.true_cores, r.stored_gpus, r.true_gpus) for r in report.rows] == [
        ("subscription", f"{flagged.show.str_name} / {flagged.alloc.str_name}", 0, 250, 3, 1),
        ("layer_resource", f"{unflagged.job.str_name} / {unflagged.layer.str_name}", 1, 300, 0, 0),
        ("folder_resource", f"{flagged.show.str_name} / {flagged.folder.str_name}", 400, 250, 1, 1),
    ]
    folder = report.rows[2].as_dict()
    assert folder["cores"] == {"stored": 4, "true": 2.5, "difference": 1.5}
    assert report.rows[0].as_dict()["gpus"] == {"stored": 3, "true": 1, "difference": 2}


def test_one_show(maestro_era, drifted_farms):
    flagged, _ = drifted_farms
    report = cuebot_table_drift(show_ids=[flagged.show.id])
    assert report.shows == 1 and {r.show_id for r in report.rows} == {flagged.show.id} and len(report.rows) == 2


def test_in_the_redis_era_only_unflagged_shows_are_cuebots(drifted_farms):
    _, unflagged = drifted_farms
    report = cuebot_table_drift()
    assert report.shows == 1 and [r.table for r in report.rows] == ["layer_resource"]
    assert cuebot_table_drift(show_ids=[drifted_farms[0].show.id]).rows == []


def test_job_point_and_local_counters(maestro_era, cuebot_farm):
    cuebot_farm.add_proc(cores=200, local=True)
    cuebot_farm.add_proc(cores=100)
    assert cuebot_table_drift().rows == []
    set_as_cuebot("UPDATE job_resource SET int_local_cores = 0 WHERE pk_job = %s", cuebot_farm.job.id)
    set_as_cuebot("UPDATE point SET int_cores = -1 WHERE pk_show = %s", cuebot_farm.show.id)
    rows = cuebot_table_drift().rows
    assert [(r.table, r.columns, r.name, r.cores_difference) for r in rows] == [
        ("job_resource", "int_local_cores, int_local_gpus", cuebot_farm.job.str_name, -200),
        ("point", "int_cores, int_gpus", f"{cuebot_farm.show.str_name} / {cuebot_farm.dept.str_name}", -101),
    ]


def test_signed_cores_is_exact_and_never_reads_minus_one_as_unlimited():
    assert [signed_cores(c) for c in (250, 300, -1, -150, 0)] == [2.5, 3, -0.01, -1.5, 0]
