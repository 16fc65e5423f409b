"""What a proc counts for (docs/redis-protocol.md): a proc that exists is booked until it is
released, whatever its job's state, so no counter reads below SUM(proc) when a killed job's
procs (FINISHED first, released after) go, whichever reseeder ran in between."""

import pytest

from accounting.live import keys
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.reseed import reseed_booked
from accounting.reconcile.snapshot import booked_rows
from accounting.release.unbook import unbook_procs
from infra.metrics import RELEASE_WITHHELD
from simulator.reconcile import reseed_like_scheduler

pytestmark = pytest.mark.django_db


def truth(farm) -> dict[str, tuple[int, int]]:
    """SUM(proc) per key, converted per proc, every existing non-local proc counted."""
    return {key: (cores, gpus) for key, cores, gpus, _ in booked_rows(show_ids=[farm.show.id])}


def below_truth(acct_redis, farm) -> dict[str, tuple[int, int]]:
    """Every (key: Redis minus SUM(proc)) where Redis counts fewer cores or GPUs than exist."""
    low = {}
    for key, (cores, gpus) in truth(farm).items():
        redis_cores, redis_gpus = (int(v or 0) for v in acct_redis.hmget(key, "int_cores", "int_gpus"))
        if redis_cores < cores or redis_gpus < gpus:
            low[key] = (redis_cores - cores, redis_gpus - gpus)
    return low


def test_a_reseed_keeps_counting_the_procs_of_a_killed_job_until_they_are_released(farm, killed_job):
    job, layer, procs = killed_job
    # 5 × 1 + 5 × 2 cores and 3 GPUs of the killed job, beside 4 cores and 1 GPU.
    assert truth(farm)[keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)] == (19, 4)
    assert truth(farm)[keys.job(job_id=job.id)] == (15, 3)
    assert truth(farm)[keys.layer(layer_id=layer.id)] == (15, 3)


@pytest.mark.parametrize("scheduler_reseeds", [True, False], ids=["scheduler-reseeds", "only-this-service-reseeds"])
def test_killed_jobs_procs_released_after_our_reseed_leave_no_counter_low(
    farm,
    killed_job,
    seeded_redis,
    settings,
    django_capture_on_commit_callbacks,
    scheduler_reseeds,
):
    settings.ACCOUNTING_SCHEDULER_RESEEDS = scheduler_reseeds
    _, _, procs = killed_job
    assert reseed_booked(show_ids=[farm.show.id]).written  # the window between the kill and the releases

    with django_capture_on_commit_callbacks(execute=True):
        unbook_procs(proc_ids=[p.id for p in procs])

    assert below_truth(seeded_redis, farm) == {}
    if not scheduler_reseeds:
        assert not drift_report(show_ids=[farm.show.id]).drifted  # published exactly


def test_where_the_scheduler_reseeds_a_killed_jobs_releases_are_withheld_and_redis_stays_high(
    farm,
    killed_job,
    seeded_redis,
    django_capture_on_commit_callbacks,
):
    _, _, procs = killed_job
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    withheld_before = RELEASE_WITHHELD.labels(reason="job_finished")._value.get()
    # The scheduler's own reseed in the window: it leaves the killed job's procs out.
    assert reseed_like_scheduler(show_ids=[farm.show.id]).written
    assert seeded_redis.hmget(sub, "int_cores", "int_gpus") == ["4", "1"]

    with django_capture_on_commit_callbacks(execute=True):
        unbook_procs(proc_ids=[p.id for p in procs])

    assert below_truth(seeded_redis, farm) == {}
    assert seeded_redis.hmget(sub, "int_cores", "int_gpus") == ["4", "1"]  # equal to the truth again
    assert RELEASE_WITHHELD.labels(reason="job_finished")._value.get() - withheld_before == 10


def test_without_withholding_the_schedulers_reseed_and_the_releases_would_take_counters_low(
    farm,
    killed_job,
    seeded_redis,
    settings,
    django_capture_on_commit_callbacks,
):
    # The mechanism above is what stands between this deployment and a low counter.
    settings.ACCOUNTING_SCHEDULER_RESEEDS = False
    _, _, procs = killed_job
    assert reseed_like_scheduler(show_ids=[farm.show.id]).written

    with django_capture_on_commit_callbacks(execute=True):
        unbook_procs(proc_ids=[p.id for p in procs])

    low = below_truth(seeded_redis, farm)
    # The folder and the point have 4 cores and 1 GPU left to count; the release took 15 and 3
    # off them again (the script clamps at zero, which hides the rest of the shortfall).
    assert low[keys.folder(folder_id=farm.folder.id)] == (-4, -1)
    assert low[keys.point(dept_id=farm.dept.id, show_id=farm.show.id)] == (-4, -1)


def test_a_proc_whose_job_row_is_gone_counts_for_its_subscription_job_and_layer(farm, seeded_redis):
    job, layer = farm.add_job()
    farm.add_proc(cores=300, gpus=1, layer=layer)
    farm.delete_job_as_cuebot_does(job=job)  # proc has no foreign key on pk_job: the row can go first

    counted = truth(farm)

    assert counted[keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)] == (3, 1)
    assert counted[keys.job(job_id=job.id)] == (3, 1)
    assert counted[keys.layer(layer_id=layer.id)] == (3, 1)
    assert counted[keys.folder(folder_id=farm.folder.id)] == (0, 0)  # unknown: no folder, no point
    assert None not in counted
