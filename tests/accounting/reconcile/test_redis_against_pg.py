"""Drift inspector: selectors, command, API and admin page, on the real services."""

import json
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.urls import reverse

from accounting.live import keys
from accounting.live.booking import book
from accounting.reconcile.redis_against_pg import (
    CLOSED,
    IN_FLIGHT,
    NOT_SEEDED,
    REBUILD_OWED,
    REBUILDING,
    DriftRow,
    drift_report,
)
from accounting.reconcile.reseed import reseed, seed_show
from accounting.release.unbook import unbook_proc
from tests.farms import build_farm

pytestmark = pytest.mark.django_db


def sub_key(farm) -> str:
    return keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)


def test_no_drift_after_a_reseed(farm):
    farm.add_proc(cores=250, gpus=1)
    farm.add_proc(cores=50)  # 0 cores in Redis, converted per proc
    seed_show(show_id=farm.show.id)
    report = drift_report()
    assert report.rows == [] and report.fields_checked > 0 and not report.drifted


def test_tampering_shows_the_right_rows(farm, acct_redis):
    farm.add_proc(cores=250)
    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_cores", 7)
    acct_redis.hdel(sub_key(farm), "burst")
    acct_redis.hset(keys.job(job_id=farm.job.id), "int_max_cores", 12)
    rows = sorted(drift_report(show_ids=[farm.show.id]).rows, key=lambda row: (row.key, row.field))
    assert rows == sorted(
        [
            DriftRow(key=sub_key(farm), field="int_cores", redis=7, pg=2, difference=5),
            DriftRow(key=sub_key(farm), field="burst", redis=None, pg=200, difference=-200),
            DriftRow(key=keys.job(job_id=farm.job.id), field="int_max_cores", redis=12, pg=100, difference=-88),
        ],
        key=lambda row: (row.key, row.field),
    )


def test_in_flight_booking_is_not_drift(farm):
    seed_show(show_id=farm.show.id)
    ids = dict(
        show_id=farm.show.id,
        alloc_id=farm.alloc.id,
        folder_id=farm.folder.id,
        job_id=farm.job.id,
        layer_id=farm.layer.id,
        dept_id=farm.dept.id,
    )
    assert book(**ids, cores=300, gpus=0, op_id=uuid.uuid4().hex).ok  # proc not inserted yet
    assert drift_report().rows == []
    assert book(**ids, cores=300, gpus=0).ok  # an unregistered booking with no proc is drift
    assert {(row.field, row.difference) for row in drift_report().rows} == {("int_cores", 3)}


def test_cuebot_managed_shows_are_not_inspected(farm, cuebot_farm):
    seed_show(show_id=farm.show.id)
    assert drift_report().shows == [farm.show.id]


def test_command_exit_codes_and_json(farm, acct_redis, capsys):
    seed_show(show_id=farm.show.id)
    call_command("acct_drift")  # returns: exit 0
    assert "0 drifted" in capsys.readouterr().out
    acct_redis.hset(sub_key(farm), "int_cores", 5)
    with pytest.raises(SystemExit) as exited:
        call_command("acct_drift", "--show", farm.show.str_name, "--json")
    assert exited.value.code == 1
    data = json.loads(capsys.readouterr().out)
    assert data["fields_drifted"] == 1
    # No periodic check has seen it drifted yet (tests/accounting/reconcile/test_drift_history.py).
    assert data["rows"][0] == {
        "key": sub_key(farm),
        "field": "int_cores",
        "redis": 5,
        "pg": 0,
        "difference": 5,
        "cause": None,
        "names": f"{farm.show.str_name} / {farm.alloc.str_name}",
        "label": "cores booked",
        "first_seen": None,
        "age_seconds": None,
        "since": "5.00 cores high, not seen drifted by the periodic check yet",
    }


def test_api_drift(farm, acct_redis, reader_client):
    client = reader_client
    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_gpus", 2)
    body = client.get("/api/v1/accounting/drift", {"show": farm.show.str_name}).json()
    assert [(row["field"], row["difference"]) for row in body["rows"]] == [("int_gpus", 2)]
    missing = client.get("/api/v1/accounting/drift", {"show": "nosuchshow"})
    assert missing.status_code == 404 and "nosuchshow" in missing.json()["detail"]


def test_admin_page_shows_chart_and_rows(farm, acct_redis, client):
    farm.add_proc(cores=5000)
    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_cores", 60)
    admin = get_user_model().objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(admin)
    page = client.get(f"/admin/accounting/drift/{farm.show.id}/").content.decode()
    assert "Redis live 60 cores, SUM(proc) now 50 cores; size 100, burst 200 cores" in page
    assert "width: 30.0%" in page and "width: 25.0%" in page  # 60 and 50 of the 200-core burst
    assert "1 of" in page and sub_key(farm) in page
    assert farm.show.str_name in client.get("/admin/accounting/drift/").content.decode()


def test_reseed_command(farm, seeded_redis, acct_redis, capsys):
    farm.add_proc(cores=250)
    other = build_farm(managed=True)
    call_command("acct_reseed", "--show", farm.show.str_name)
    out = capsys.readouterr().out
    assert "booked:" in out and "limits:" in out
    assert acct_redis.hget(sub_key(farm), "int_cores") == "2"
    assert not acct_redis.exists(sub_key(other))
    call_command("acct_reseed", "--limits")
    assert acct_redis.hget(sub_key(other), "burst") == "200" and not acct_redis.hexists(sub_key(other), "int_cores")


def test_reseed_command_unknown_show_exits_2(farm, acct_redis):
    with pytest.raises(CommandError) as error:
        call_command("acct_reseed", "--show", "nosuchshow")
    assert error.value.returncode == 2
    assert acct_redis.keys("acct:*") == []


def test_reseed_command_on_a_cuebot_managed_show_writes_no_redis_key(cuebot_farm, acct_redis):
    """Its five tables are what it is booked against (tests/accounting/reconcile/test_tables_against_procs.py)."""
    cuebot_farm.add_proc(cores=100)
    call_command("acct_reseed", "--show", cuebot_farm.show.str_name)
    assert acct_redis.keys("acct:*") == []


def test_reseed_then_drift_across_the_farm(farm, cuebot_farm, seeded_redis):
    farm.add_proc(cores=250)
    cuebot_farm.add_proc(cores=100)
    reseed()
    assert drift_report().rows == []


def test_a_key_the_schedulers_recompute_wrote_differs_by_rounding_only(farm, seeded_redis, capsys):
    """Two 2.5-core procs: per proc 2 + 2 = 4 cores, the scheduler's recompute (sum, then
    convert) writes 5. That is rounding, not drift; a 6 would be drift."""
    farm.add_proc(cores=250)
    farm.add_proc(cores=250)
    seed_show(show_id=farm.show.id)
    job_key = keys.job(job_id=farm.job.id)
    sub_key = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    seeded_redis.hset(job_key, "int_cores", 5)  # what the scheduler's recompute writes
    seeded_redis.hset(sub_key, "int_cores", 6)  # real drift

    report = drift_report(show_ids=[farm.show.id])

    assert [(r.key, r.redis, r.pg) for r in report.rows] == [(sub_key, 6, 4)]
    assert [(r.key, r.redis, r.pg, r.cause) for r in report.rounding_only] == [(job_key, 5, 4, "rounding")]
    with pytest.raises(SystemExit):
        call_command("acct_drift", "--show", farm.show.str_name)
    assert (
        "1 drifted, 1 differ only by the scheduler's sum-then-convert rounding (not drift)" in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "markers, state",
    [
        ({}, NOT_SEEDED),  # came up empty
        ({keys.BOOTSTRAPPING: "token"}, REBUILDING),  # the rebuild is running
        ({keys.SEEDED: keys.SEEDED_VALUE, keys.REBUILD_OWED: "1"}, REBUILD_OWED),  # promoted replica
    ],
    ids=["not-seeded", "rebuilding", "rebuild-owed"],
)
def test_closed_keys_are_named_closed_never_drift(farm, acct_redis, capsys, markers, state):
    farm.add_proc(cores=250, gpus=1)
    # What a Redis that came up empty holds once releases recreated a counter: no limit field.
    acct_redis.hset(sub_key(farm), "int_cores", 0)
    for key, value in markers.items():
        acct_redis.set(key, value)

    report = drift_report(show_ids=[farm.show.id])

    assert report.redis_state == state and not report.drifted
    assert {row.cause for row in report.explained} == {CLOSED}
    assert len(report.explained) > 10  # every limit missing, every counter low: all closed
    call_command("acct_drift", "--show", farm.show.str_name)  # exit 0: nothing drifted
    out = capsys.readouterr().out
    assert (
        f"the accounting Redis is {state}" in out and "0 drifted" in out and "differ on closed keys (not drift)" in out
    )


def test_an_aborted_release_is_in_flight_until_its_entry_expires_and_a_low_key_is_still_drift(
    farm,
    seeded_redis,
    client,
    admin_user,
):
    proc = farm.add_proc(cores=300, gpus=1)
    seed_show(show_id=farm.show.id)
    with pytest.raises(RuntimeError), transaction.atomic():
        unbook_proc(proc_id=proc.id)  # registers the release in flight, then the caller rolls back
        raise RuntimeError("the caller's transaction fails")
    assert seeded_redis.hlen(keys.INFLIGHT) == 1  # until ACCOUNTING_INFLIGHT_TTL_SECONDS
    seeded_redis.hset(keys.folder(folder_id=farm.folder.id), "int_cores", 0)  # a lost booking: low

    report = drift_report(show_ids=[farm.show.id])

    assert [(row.key, row.field, row.redis, row.pg) for row in report.rows] == [
        (keys.folder(folder_id=farm.folder.id), "int_cores", 0, 6)
    ]  # SUM(proc) 3, with the entry 6
    in_flight = report.explained_by(IN_FLIGHT)
    assert len(in_flight) == 9  # the other four keys' cores and all five keys' GPUs
    assert all(row.redis == row.pg - (3 if row.field == "int_cores" else 1) for row in in_flight)
    client.force_login(admin_user)
    page = client.get(reverse("acct-drift-show", args=[farm.show.id])).content.decode()
    assert "In flight (not drift): 9 fields" in page and "1 of" in page


def test_keys_a_rebuild_without_our_marker_opened_are_still_compared(farm, acct_redis):
    # The scheduler's own bootstrap writes counters and limits but never acct:seeded.
    farm.add_proc(cores=250)
    seed_show(show_id=farm.show.id)
    acct_redis.delete(keys.SEEDED)
    acct_redis.hset(sub_key(farm), "int_cores", 9)

    report = drift_report(show_ids=[farm.show.id])

    assert report.redis_state == NOT_SEEDED
    assert [(row.key, row.field, row.redis, row.pg) for row in report.rows] == [(sub_key(farm), "int_cores", 9, 2)]
    assert report.explained_by(CLOSED) == []


def test_api_drift_without_a_show_answers_the_last_check_not_a_farm_wide_read(farm, acct_redis, reader_client):
    from accounting.reconcile.drift_check import run_check
    from accounting.reconcile.redis_against_pg import REDIS_FIELDS

    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_gpus", 2)
    run_check(REDIS_FIELDS)
    acct_redis.hset(sub_key(farm), "int_gpus", 5)  # after the check: not in its answer
    body = reader_client.get("/api/v1/accounting/drift").json()
    assert body["checked_at"] is not None and body["source"].startswith("the periodic drift check")
    assert body["shows"] == [
        {
            "show": farm.show.str_name,
            "show_id": farm.show.id,
            "fields_drifted": 1,
            "fields_checked": body["shows"][0]["fields_checked"],
        }
    ]


def test_api_drift_computes_one_live_report_at_a_time_per_process(farm, reader_client):
    from accounting.operators import drift_api as api

    with api._live_drift:  # another request's report is running
        busy = reader_client.get("/api/v1/accounting/drift", {"show": farm.show.str_name})
    assert busy.status_code == 429 and "retry" in busy.json()["detail"]
    assert reader_client.get("/api/v1/accounting/drift", {"show": farm.show.str_name}).status_code == 200


def test_the_command_names_each_key_and_keeps_it_for_scripts(farm, acct_redis, capsys):
    seed_show(show_id=farm.show.id)
    acct_redis.hset(sub_key(farm), "int_cores", 5)
    with pytest.raises(SystemExit):
        call_command("acct_drift", "--show", farm.show.str_name)
    first = capsys.readouterr().out.splitlines()[0].split("\t")
    assert first[0] == f"{farm.show.str_name} / {farm.alloc.str_name}" and first[-1] == sub_key(farm)


def test_the_api_names_each_drifted_key(farm, acct_redis, reader_client):
    seed_show(show_id=farm.show.id)
    acct_redis.hset(keys.job(job_id=farm.job.id), "int_cores", 7)
    body = reader_client.get("/api/v1/accounting/drift", {"show": farm.show.str_name}).json()
    assert [row["names"] for row in body["rows"]] == [f"job {farm.show.str_name} / {farm.job.str_name}"]
