"""What a reseed without the in-flight overlay costs: the reference design's (the scheduler's
own recompute) against this project's, in the window between a release's COMMIT and its publish;
and how low the scheduler's reseed reads between a job's kill and its procs' releases (issue 42),
the bound docs/redis-protocol.md states and the simulator holds that reseed to."""

import pytest

from accounting.live import keys
from accounting.reconcile.reseed import reseed_booked, seed_show
from accounting.release.unbook import unbook_proc
from simulator.invariants import SchedulerBound, against_truth
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


# A killed job on the busy farm (issue 42): OpenCue marks it FINISHED first and releases its
# procs as their hosts report back, so a job filled to its caps still holds them all when the
# scheduler's reseed comes. That reseed leaves them out (its rule); the release path withholds
# their decrements (ACCOUNTING_SCHEDULER_RESEEDS). In between, what can this service promise?


def test_the_schedulers_reseed_between_a_kill_and_its_releases_reads_low_by_exactly_the_killed_jobs_procs(
    farm, killed_job, seeded_redis, django_capture_on_commit_callbacks
):
    job, layer, procs = killed_job
    assert reseed_like_scheduler(show_ids=[farm.show.id]).written

    below = {
        (key, name): actual - expected for key, name, actual, expected in against_truth(show_ids=[farm.show.id]).low
    }
    # The keys its snapshot sums FINISHED jobs' procs out of, by those procs, and only those:
    # it never writes the job and layer keys of a FINISHED job.
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    folder, point = keys.folder(folder_id=farm.folder.id), keys.point(dept_id=farm.dept.id, show_id=farm.show.id)
    assert below == {(k, f): -n for k in (sub, folder, point) for f, n in (("int_cores", 15), ("int_gpus", 3))}
    # That is the bound the simulator holds that reseed to: nothing below it, all of it seen.
    bounded = against_truth(show_ids=[farm.show.id], bound=SchedulerBound())
    assert bounded.low == [] and len(bounded.tolerated) == 6

    with django_capture_on_commit_callbacks(execute=True):
        for proc in procs:  # one call each, as Cuebot releases a killed job's procs
            unbook_proc(proc_id=proc.id)

    # Withheld, they leave every key at SUM(proc) again: the low reading lasted until the
    # killed job's last proc was released, no longer, and went no further.
    after = against_truth(show_ids=[farm.show.id], bound=SchedulerBound())
    assert after.low == [] and after.tolerated == []
    assert against_truth(show_ids=[farm.show.id]).low == []


def test_a_release_path_that_publishes_a_finished_jobs_decrements_goes_below_that_bound(
    farm, killed_job, seeded_redis, settings, django_capture_on_commit_callbacks
):
    settings.ACCOUNTING_SCHEDULER_RESEEDS = False  # the decrements published, as the broken variant does
    _, _, procs = killed_job
    assert reseed_like_scheduler(show_ids=[farm.show.id]).written

    with django_capture_on_commit_callbacks(execute=True):
        for proc in procs:
            unbook_proc(proc_id=proc.id)

    low = {key for key, *_ in against_truth(show_ids=[farm.show.id], bound=SchedulerBound()).low}
    assert {keys.folder(folder_id=farm.folder.id), keys.point(dept_id=farm.dept.id, show_id=farm.show.id)} <= low


def test_what_the_schedulers_write_ignored_in_flight_is_the_rest_of_its_bound(
    farm, seeded_redis, django_capture_on_commit_callbacks
):
    """The release case above, through the bound: the write says what it ignored on each key,
    and the key reads below SUM(proc) by that much at most."""
    farm.add_proc(cores=300, gpus=1)
    leaving = farm.add_proc(cores=200, gpus=1)
    seed_show(show_id=farm.show.id)
    with django_capture_on_commit_callbacks(execute=False) as publishes:
        unbook_proc(proc_id=leaving.pk)
    outcome = reseed_like_scheduler(show_ids=[farm.show.id])
    for publish in publishes:
        publish()

    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    assert outcome.ignored[sub] == (2, 1) and len(outcome.ignored) == 5
    assert against_truth(show_ids=[farm.show.id], bound=SchedulerBound()).low != []
    assert against_truth(show_ids=[farm.show.id], bound=SchedulerBound(ignored=outcome.ignored)).low == []
