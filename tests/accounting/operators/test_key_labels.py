"""Every kind of accounting key is labelled with the names an operator knows (the drift pages,
acct_drift), and a row that is gone says so instead of borrowing another row's name."""

import pytest

from accounting.live import keys
from accounting.operators.names import key_labels
from tests.farms import build_farm

pytestmark = pytest.mark.django_db


def test_each_kind_of_key_reads_with_its_names(farm):
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    point = keys.point(dept_id=farm.dept.id, show_id=farm.show.id)
    folder, job, layer = (
        keys.folder(folder_id=farm.folder.id),
        keys.job(job_id=farm.job.id),
        keys.layer(layer_id=farm.layer.id),
    )
    labels = key_labels(redis_keys=[sub, point, folder, job, layer])
    show = farm.show.str_name
    assert labels == {
        sub: f"{show} / {farm.alloc.str_name}",
        point: f"{show} / {farm.dept.str_name}",
        folder: f"folder {show} / root",
        job: f"job {show} / {farm.job.str_name}",
        layer: f"layer {show} / {farm.job.str_name} / render",
    }


def test_a_subscription_key_is_named_by_its_own_show_when_several_shows_share_the_allocation(farm):
    """The allocation id is the key's last part: looking the show up by it read 'show gone'."""
    other = build_farm(managed=True)
    key = keys.sub(show_id=other.show.id, alloc_id=farm.alloc.id)
    assert key_labels(redis_keys=[key]) == {key: f"{other.show.str_name} / {farm.alloc.str_name}"}


def test_rows_that_are_gone_say_so(db):
    gone = "00000000-0000-0000-0000-000000000000"
    sub, point, job = (
        keys.sub(show_id=gone, alloc_id=gone),
        keys.point(dept_id=gone, show_id=gone),
        keys.job(job_id=gone),
    )
    assert key_labels(redis_keys=[sub, point, job]) == {
        sub: "show gone / allocation gone",
        point: "show gone / department gone",
        job: "job gone (00000000…)",
    }


def test_every_kind_of_key_is_named_in_four_queries_whatever_their_number(farm, django_assert_num_queries):
    """The parents of the folders, the jobs and the layers (a query each), then every name at once."""
    farms = [farm, build_farm(managed=True), build_farm(managed=False)]
    wanted = [
        key
        for f in farms
        for key in (
            keys.sub(show_id=f.show.id, alloc_id=f.alloc.id),
            keys.point(dept_id=f.dept.id, show_id=f.show.id),
            keys.folder(folder_id=f.folder.id),
            keys.job(job_id=f.job.id),
            keys.layer(layer_id=f.layer.id),
        )
    ]
    with django_assert_num_queries(4):
        labels = key_labels(redis_keys=wanted)
    assert len(labels) == 15 and not any("gone" in label for label in labels.values())
