"""Cuebot's own tables against SUM(proc): which rows the selector names, per era."""

import json

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from accounting.live.units import signed_cores
from accounting.reconcile.tables_against_procs import cuebot_table_drift
from simulator.pg_truth import mismatches
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
    set_as_cuebot(
        "UPDATE subscription SET int_cores = 0, int_gpus = 3 WHERE pk_subscription = %s", flagged.subscription.id
    )
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


def acct_drift(*args: str) -> int:
    try:
        call_command("acct_drift", *args)
    except SystemExit as exited:
        return exited.code
    return 0


def test_acct_drift_names_the_rows_and_acct_reseed_repairs_them_without_redis(maestro_era, drifted_farms, capsys):
    flagged, unflagged = drifted_farms
    assert acct_drift() == 1
    out = capsys.readouterr().out
    assert (
        f"{flagged.show.str_name} / {flagged.alloc.str_name}\tsubscription (int_cores, int_gpus)\t"
        "cores stored=0 true=2.5 diff=-2.5\tgpus stored=3 true=1 diff=+2\t"
    ) in out
    assert (
        f"{flagged.show.str_name} / {flagged.folder.str_name}\tfolder_resource (int_cores, int_gpus)\tcores stored=4 true=2.5"
        in out
    )
    assert (
        f"{unflagged.job.str_name} / {unflagged.layer.str_name}\tlayer_resource (int_cores, int_gpus)\tcores stored=0.01 true=3"
        in out
    )
    assert "2 show(s), 3 row(s) drifted; repair: manage.py acct_reseed" in out
    assert "redis" not in out.lower()

    assert acct_drift("--show", unflagged.show.str_name, "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert list(data) == ["cuebot_tables"]
    assert data["cuebot_tables"]["repair"] == f"manage.py acct_reseed --show {unflagged.show.str_name}"
    assert [(r["name"], r["cores"]) for r in data["cuebot_tables"]["rows"]] == [
        (f"{unflagged.job.str_name} / {unflagged.layer.str_name}", {"stored": 0.01, "true": 3, "difference": -2.99})
    ]

    call_command("acct_reseed", "--show", unflagged.show.str_name)
    assert "1 row(s) had drifted, 0 differ now" in capsys.readouterr().out
    assert acct_drift() == 1  # the flagged show is not repaired by a reseed of another
    capsys.readouterr()
    call_command("acct_reseed")
    assert (
        "Cuebot's tables of 2 show(s) recomputed from SUM(proc): 2 row(s) had drifted, 0 differ now"
        in capsys.readouterr().out
    )
    assert acct_drift() == 0
    assert "2 show(s), 0 row(s) drifted\n" in capsys.readouterr().out
    assert pg_mismatches(flagged, unflagged) == []


def pg_mismatches(*farms) -> list:
    return [row for farm in farms for row in mismatches(show_id=farm.show.id)]


def test_acct_drift_in_the_redis_era_adds_cuebot_shows_to_the_redis_report(drifted_farms, capsys):
    _, unflagged = drifted_farms
    assert acct_drift() == 1
    out = capsys.readouterr().out
    assert "1 show(s), " in out and ", 0 drifted" in out  # Redis: the flagged show, as before
    assert (
        "Cuebot's tables against SUM(proc): 1 show(s), 1 row(s) drifted; repair: manage.py acct_reseed --cuebot-tables"
        in out
    )


def redis_snapshot(client) -> dict:
    return {key: client.dump(key) for key in sorted(client.keys("*"))}


def test_in_the_redis_era_acct_reseed_repairs_a_cuebot_managed_shows_tables_and_no_redis(
    drifted_farms, acct_redis, capsys
):
    flagged, unflagged = drifted_farms
    redis_before = redis_snapshot(acct_redis)
    call_command("acct_reseed", "--show", unflagged.show.str_name)
    out = capsys.readouterr().out
    assert f"{unflagged.job.str_name} / {unflagged.layer.str_name}\tlayer_resource (int_cores, int_gpus)" in out
    assert "Cuebot's tables of 1 show(s) recomputed from SUM(proc): 1 row(s) had drifted, 0 differ now" in out
    assert pg_mismatches(unflagged) == []
    # The scheduler-managed show's rows are its scheduler's record, not Cuebot's: left as they were.
    assert {row[0] for row in pg_mismatches(flagged)} == {"subscription", "folder_resource"}
    assert redis_snapshot(acct_redis) == redis_before
    assert acct_drift("--show", unflagged.show.str_name) == 0


def test_in_the_redis_era_acct_reseed_cuebot_tables_repairs_every_cuebot_managed_show(drifted_farms, capsys):
    flagged, unflagged = drifted_farms
    other = build_farm(managed=False)
    other.add_proc(cores=100)
    set_as_cuebot("UPDATE point SET int_cores = 0 WHERE pk_show = %s", other.show.id)
    call_command("acct_reseed", "--cuebot-tables")
    assert (
        "Cuebot's tables of 2 show(s) recomputed from SUM(proc): 2 row(s) had drifted, 0 differ now"
        in capsys.readouterr().out
    )
    assert pg_mismatches(unflagged, other) == []
    assert {row[0] for row in pg_mismatches(flagged)} == {"subscription", "folder_resource"}


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (("--show", "{flagged}", "--cuebot-tables"), "is scheduler-managed: its tables are not Cuebot's"),
        (("--show", "{unflagged}", "--booked"), "--limits and --booked are Redis's"),
        (("--cuebot-tables", "--limits"), "--limits and --booked are Redis's"),
    ],
)
def test_acct_reseed_refuses_what_does_not_apply_to_a_shows_tables_and_changes_nothing(
    drifted_farms, acct_redis, args, refusal
):
    flagged, unflagged = drifted_farms
    names = {"flagged": flagged.show.str_name, "unflagged": unflagged.show.str_name}
    pg_before, redis_before = pg_mismatches(flagged, unflagged), redis_snapshot(acct_redis)
    with pytest.raises(CommandError, match=refusal) as refused:
        call_command("acct_reseed", *(arg.format(**names) for arg in args))
    assert refused.value.returncode == 2
    assert (pg_mismatches(flagged, unflagged), redis_snapshot(acct_redis)) == (pg_before, redis_before)


def test_in_the_notify_era_the_repair_needs_no_redis(notify_era, drifted_farms, capsys):
    flagged, unflagged = drifted_farms
    assert acct_drift() == 1
    assert "1 row(s) drifted; repair: manage.py acct_reseed --cuebot-tables" in capsys.readouterr().out
    call_command("acct_reseed", "--cuebot-tables")
    assert "1 row(s) had drifted, 0 differ now" in capsys.readouterr().out
    assert acct_drift() == 0
    assert pg_mismatches(unflagged) == []
    assert {row[0] for row in pg_mismatches(flagged)} == {"subscription", "folder_resource"}
    with pytest.raises(CommandError, match="the notify era keeps no Redis live view") as refused:
        call_command("acct_reseed", "--show", flagged.show.str_name)
    assert refused.value.returncode == 2
    assert {row[0] for row in pg_mismatches(flagged)} == {"subscription", "folder_resource"}
