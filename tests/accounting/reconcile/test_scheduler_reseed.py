"""What a reseed without the in-flight overlay costs: the reference design's (the scheduler's
own recompute) against this project's, in the window between a release's COMMIT and its publish."""

import pytest

from accounting.live import keys
from accounting.reconcile.reseed import reseed_booked, seed_show
from accounting.release.unbook import unbook_proc
from simulator.reconcile import reseed_like_scheduler

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "reseeder, expected",
    [
        ("project", {"int_cores": "3", "int_gpus": "1"}),  # exact
        ("scheduler", {"int_cores": "1", "int_gpus": "0"}),  # 2 cores and 1 GPU low: the scheduler may overbook
    ],
)
def test_reseed_between_a_releases_commit_and_its_publish(
    farm, seeded_redis, django_capture_on_commit_callbacks, reseeder, expected
):
    farm.add_proc(cores=300, gpus=1)
    leaving = farm.add_proc(cores=200, gpus=1)
    seed_show(show_id=farm.show.id)
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    assert seeded_redis.hmget(sub, "int_cores", "int_gpus") == ["5", "2"]
    with django_capture_on_commit_callbacks(execute=False) as publishes:
        unbook_proc(proc_id=leaving.pk)  # committed (as far as the snapshot sees); not published yet
    if reseeder == "project":
        assert reseed_booked(show_ids=[farm.show.id]).written
    else:
        outcome = reseed_like_scheduler(show_ids=[farm.show.id])
        assert outcome.written and outcome.exposed_keys == 5  # the release's five keys
    for publish in publishes:
        publish()
    assert dict(zip(("int_cores", "int_gpus"), seeded_redis.hmget(sub, "int_cores", "int_gpus"))) == expected
