"""Every field of every kind of accounting key reads with an operator's name on each face that
lists drift (the admin's drift page, acct_drift, the drift API), the raw Redis field beside it
for scripts (issue 22: the drift table named `int_cores`, `int_gpus` raw)."""

import json

import pytest
from django.core.management import call_command

from accounting.live import keys
from accounting.models import FolderResource, JobResource, Point, Subscription
from accounting.operators.names import field_label
from accounting.reconcile.redis_against_pg import BOOKED_FIELDS
from accounting.reconcile.reseed import seed_show
from accounting.reconcile.snapshot import LIMIT_FIELDS

pytestmark = pytest.mark.django_db

# What each kind of key holds, from the code that writes it: the booked counters on all five,
# the limit fields of its table (accounting.reconcile.snapshot.LIMIT_FIELDS) on four.
KIND_FIELDS = {
    "sub": BOOKED_FIELDS + tuple(name for name, _, _ in LIMIT_FIELDS[Subscription]),
    "folder": BOOKED_FIELDS + tuple(name for name, _, _ in LIMIT_FIELDS[FolderResource]),
    "job": BOOKED_FIELDS + tuple(name for name, _, _ in LIMIT_FIELDS[JobResource]),
    "layer": BOOKED_FIELDS,
    "point": BOOKED_FIELDS + tuple(name for name, _, _ in LIMIT_FIELDS[Point]),
}
EXPECTED = {
    "sub": {"int_cores": "cores booked", "int_gpus": "GPUs booked", "size": "size in cores", "burst": "burst in cores"},
    "folder": {
        "int_cores": "cores booked",
        "int_gpus": "GPUs booked",
        "int_min_cores": "min cores",
        "int_max_cores": "max cores",
        "int_min_gpus": "min GPUs",
        "int_max_gpus": "max GPUs",
    },
    "job": {
        "int_cores": "cores booked",
        "int_gpus": "GPUs booked",
        "int_max_cores": "max cores",
        "int_max_gpus": "max GPUs",
        "int_priority": "priority",
    },
    "layer": {"int_cores": "cores booked", "int_gpus": "GPUs booked"},
    "point": {
        "int_cores": "cores booked",
        "int_gpus": "GPUs booked",
        "int_min_cores": "min cores",
        "int_min_gpus": "min GPUs",
    },
}


def farm_keys(farm) -> dict[str, str]:
    return {
        "sub": keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id),
        "folder": keys.folder(folder_id=farm.folder.id),
        "job": keys.job(job_id=farm.job.id),
        "layer": keys.layer(layer_id=farm.layer.id),
        "point": keys.point(dept_id=farm.dept.id, show_id=farm.show.id),
    }


@pytest.mark.parametrize("kind", sorted(KIND_FIELDS))
def test_every_field_of_each_kind_of_key_has_an_operators_name(kind):
    some = "00000000-0000-0000-0000-000000000001"
    key = {
        "sub": keys.sub(show_id=some, alloc_id=some),
        "folder": keys.folder(folder_id=some),
        "job": keys.job(job_id=some),
        "layer": keys.layer(layer_id=some),
        "point": keys.point(dept_id=some, show_id=some),
    }[kind]
    assert {field: field_label(key=key, field=field) for field in KIND_FIELDS[kind]} == EXPECTED[kind]


def test_a_field_a_key_does_not_hold_reads_as_itself():
    assert field_label(key=keys.layer(layer_id="x"), field="burst") == "burst"
    assert field_label(key="acct:seq", field="int_cores") == "int_cores"


@pytest.fixture
def every_kind_drifted(farm, acct_redis) -> dict[str, tuple[str, str]]:
    """Per kind of key, one of its fields tampered with in Redis: kind -> (key, field)."""
    seed_show(show_id=farm.show.id)
    tampered = {
        "sub": "burst",
        "folder": "int_max_gpus",
        "job": "int_priority",
        "layer": "int_gpus",
        "point": "int_min_cores",
    }
    found = farm_keys(farm)
    for kind, field in tampered.items():
        acct_redis.hincrby(found[kind], field, 7)
    return {kind: (found[kind], field) for kind, field in tampered.items()}


def test_acct_drift_names_each_field_with_the_raw_one_beside_it(farm, every_kind_drifted, capsys):
    with pytest.raises(SystemExit):
        call_command("acct_drift", "--show", farm.show.str_name)
    lines = capsys.readouterr().out.splitlines()
    for key, field in every_kind_drifted.values():
        (line,) = [line for line in lines if line.endswith(f"\t{key}")]
        assert line.split("\t")[1] == f"{field_label(key=key, field=field)} ({field})"


def test_the_json_and_the_api_keep_the_field_and_add_its_label(farm, every_kind_drifted, capsys, reader_client):
    with pytest.raises(SystemExit):
        call_command("acct_drift", "--show", farm.show.str_name, "--json")
    from_command = json.loads(capsys.readouterr().out)
    from_api = reader_client.get("/api/v1/accounting/drift", {"show": farm.show.str_name}).json()
    expected = {(key, field, EXPECTED[kind][field]) for kind, (key, field) in every_kind_drifted.items()}
    for body in (from_command, from_api):
        assert {(row["key"], row["field"], row["label"]) for row in body["rows"]} == expected


def test_the_drift_page_shows_each_fields_name_with_the_raw_field_small_beside_it(
    farm, every_kind_drifted, admin_client
):
    page = admin_client.get(f"/admin/accounting/drift/{farm.show.id}/").content.decode()
    for kind, (_, field) in every_kind_drifted.items():
        assert f'<td>{EXPECTED[kind][field]} <code class="acct-quiet">{field}</code></td>' in page
    assert "<td>int_gpus</td>" not in page and "<td>burst</td>" not in page


def test_rounding_only_rows_are_labelled_too(farm, seeded_redis, capsys):
    farm.add_proc(cores=250)
    farm.add_proc(cores=250)
    seed_show(show_id=farm.show.id)
    job_key = keys.job(job_id=farm.job.id)
    seeded_redis.hset(job_key, "int_cores", 5)  # the scheduler's sum-then-convert value
    call_command("acct_drift", "--show", farm.show.str_name, "--json")
    (row,) = json.loads(capsys.readouterr().out)["rounding_only"]
    assert (row["key"], row["field"], row["label"], row["names"]) == (
        job_key,
        "int_cores",
        "cores booked",
        f"job {farm.show.str_name} / {farm.job.str_name}",
    )
