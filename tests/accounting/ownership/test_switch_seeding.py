"""The real seeding when a show changes owner (docs/design.md#lessons, the first two), end to end.

To the scheduler: Redis gets the show's limits and its booked counters from its procs
at once. Back to Cuebot: the five PG accounting tables equal SUM(proc) at once.
"""

import ast
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from django_q.models import Schedule

from accounting.limits.changes import set_subscription_limits
from accounting.live import keys
from accounting.live.booking import book
from accounting.models import (
    FolderResource,
    JobResource,
    LayerResource,
    Point,
    Subscription,
)
from accounting.ownership.switching import SwitchRefused, settle_reseed
from accounting.ownership.toggle import set_scheduler_managed
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.reseed import redis_is_empty, reseed
from accounting.release.unbook import unbook_proc
from shows.models import Show
from tests.farms import build_farm
from tests.processes import closed_port


def switch(farm, *, managed: bool, capture) -> None:
    with capture(execute=True):
        set_scheduler_managed(show=farm.show, managed=managed)


@pytest.fixture
def busy_cuebot_farm(cuebot_farm):
    """A Cuebot-managed show with running procs, a fractional one, a GPU one, a local one and a finished job."""
    cuebot_farm.add_proc(cores=250)
    cuebot_farm.add_proc(cores=100, gpus=1)
    cuebot_farm.add_proc(cores=400, local=True)
    finished_job, finished_layer = cuebot_farm.add_job(state="FINISHED")
    cuebot_farm.add_proc(cores=300, layer=finished_layer)
    cuebot_farm.finished_job = finished_job
    FolderResource.objects.filter(folder=cuebot_farm.folder).update(
        int_max_cores=-1, int_min_cores=150, int_max_gpus=-1
    )
    JobResource.objects.filter(job=cuebot_farm.job).update(int_max_cores=5050, int_max_gpus=3, int_priority=7)
    Point.objects.filter(show=cuebot_farm.show).update(int_min_cores=250, int_min_gpus=1)
    return cuebot_farm


@pytest.mark.django_db
def test_switch_to_scheduler_seeds_limits_and_booked_counters(
    busy_cuebot_farm, acct_redis, django_capture_on_commit_callbacks
):
    farm = busy_cuebot_farm
    switch(farm, managed=True, capture=django_capture_on_commit_callbacks)

    sub = acct_redis.hgetall(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id))
    # 250 + 100 centicores are 2 + 1 cores per proc, and the finished job's proc still runs
    # (3 cores: it counts until it is released); the local proc is left out.
    assert sub == {"size": "100", "burst": "200", "int_cores": "6", "int_gpus": "1"}
    folder = acct_redis.hgetall(keys.folder(folder_id=farm.folder.id))
    assert (folder["int_max_cores"], folder["int_min_cores"], folder["int_max_gpus"]) == ("-1", "1", "-1")
    assert (folder["int_cores"], folder["int_gpus"]) == ("6", "1")
    job = acct_redis.hgetall(keys.job(job_id=farm.job.id))
    assert (job["int_max_cores"], job["int_max_gpus"], job["int_priority"]) == ("50", "3", "7")
    assert (job["int_cores"], job["int_gpus"]) == ("3", "1")
    assert acct_redis.hgetall(keys.layer(layer_id=farm.layer.id)) == {"int_cores": "3", "int_gpus": "1"}
    point = acct_redis.hgetall(keys.point(dept_id=farm.dept.id, show_id=farm.show.id))
    assert (point["int_min_cores"], point["int_min_gpus"], point["int_cores"], point["int_gpus"]) == (
        "2",
        "1",
        "6",
        "1",
    )
    # No limits for a finished job (the scheduler books nothing for it), only its count.
    assert acct_redis.hgetall(keys.job(job_id=farm.finished_job.id)) == {"int_cores": "3", "int_gpus": "0"}
    assert not drift_report(show_ids=[farm.show.id]).drifted


@pytest.mark.django_db
def test_a_release_right_after_the_switch_goes_to_redis_and_stays_consistent(
    busy_cuebot_farm, acct_redis, django_capture_on_commit_callbacks
):
    farm = busy_cuebot_farm
    switch(farm, managed=True, capture=django_capture_on_commit_callbacks)
    with django_capture_on_commit_callbacks(execute=True):
        release = unbook_proc(proc_id=farm.procs[0].id)
    assert release.branch == "scheduler"
    # 6 seeded (the finished job's running proc included) less the 2 cores released.
    assert acct_redis.hget(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores") == "4"
    assert not drift_report(show_ids=[farm.show.id]).drifted


@pytest.mark.django_db
def test_switch_back_to_cuebot_recomputes_the_pg_tables_from_procs(farm, django_capture_on_commit_callbacks):
    farm.add_proc(cores=250, gpus=1)
    farm.add_proc(cores=400, local=True)
    # While the scheduler owned the show, its PG tables lagged (the recompute loop had not run).
    for model in (Subscription, FolderResource, JobResource, LayerResource, Point):
        model.objects.update(int_cores=0, int_gpus=0)
    JobResource.objects.update(int_local_cores=0)

    switch(farm, managed=False, capture=django_capture_on_commit_callbacks)

    assert Subscription.objects.values_list("int_cores", "int_gpus").get(pk=farm.subscription.pk) == (250, 1)
    assert FolderResource.objects.values_list("int_cores", "int_gpus").get(folder=farm.folder) == (250, 1)
    assert JobResource.objects.values_list("int_cores", "int_gpus", "int_local_cores").get(job=farm.job) == (
        250,
        1,
        400,
    )
    assert LayerResource.objects.values_list("int_cores", "int_gpus").get(layer=farm.layer) == (650, 1)
    assert Point.objects.values_list("int_cores", "int_gpus").get(show=farm.show) == (250, 1)


@pytest.mark.django_db
def test_a_switch_that_seeds_the_only_managed_show_of_an_empty_redis_marks_it_seeded(
    busy_cuebot_farm,
    acct_redis,
    django_capture_on_commit_callbacks,
):
    farm = busy_cuebot_farm
    assert redis_is_empty()  # a Redis that came up empty, before any scheduler-managed show
    switch(farm, managed=True, capture=django_capture_on_commit_callbacks)

    # Its keys are all there is: the next reseed need not close them for an in-flight TTL.
    assert not redis_is_empty()
    assert not acct_redis.exists(keys.BOOTSTRAPPING)
    assert not drift_report(show_ids=[farm.show.id]).drifted


@pytest.mark.django_db
def test_a_switch_on_an_empty_redis_leaves_the_marker_to_the_bootstrap_when_other_shows_are_managed(
    busy_cuebot_farm,
    acct_redis,
    django_capture_on_commit_callbacks,
):
    other = build_farm(managed=True)  # its keys were lost with Redis: only the bootstrap rebuilds them
    other.add_proc(cores=200)
    switch(busy_cuebot_farm, managed=True, capture=django_capture_on_commit_callbacks)

    assert redis_is_empty()
    assert acct_redis.hget(keys.sub(show_id=busy_cuebot_farm.show.id, alloc_id=busy_cuebot_farm.alloc.id), "burst")
    assert not acct_redis.exists(keys.sub(show_id=other.show.id, alloc_id=other.alloc.id))


@pytest.mark.django_db
def test_a_notify_era_switch_writes_no_redis_the_scheduler_seeds_itself(
    busy_cuebot_farm, acct_redis, settings, django_capture_on_commit_callbacks
):
    settings.ACCOUNTING_SCHEDULER = "notify"
    switch(busy_cuebot_farm, managed=True, capture=django_capture_on_commit_callbacks)
    assert acct_redis.keys("*") == []


def book_cores(farm, *, cores: int):
    return book(
        show_id=farm.show.id,
        alloc_id=farm.alloc.id,
        folder_id=farm.folder.id,
        job_id=farm.job.id,
        layer_id=farm.layer.id,
        dept_id=farm.dept.id,
        cores=cores,
        gpus=0,
    )


def back_to_the_scheduler_unseeded(farm, *, capture, cuebot_cores: list[int]) -> list:
    """The scheduler's show goes back to Cuebot, which books these procs (centicores) without its
    Redis keys hearing of them (they keep their limits), then to the scheduler again: the flag
    committed, its seeding captured and not run yet. Returns the seeding's callbacks."""
    switch(farm, managed=True, capture=capture)
    switch(farm, managed=False, capture=capture)
    for cores in cuebot_cores:
        farm.add_proc(cores=cores)
    with capture(execute=False) as seeding:
        set_scheduler_managed(show=farm.show, managed=True)
    return seeding


@pytest.mark.django_db
def test_a_show_switched_back_to_the_scheduler_books_nothing_until_its_counters_are_seeded(
    busy_cuebot_farm,
    seeded_redis,
    django_capture_on_commit_callbacks,
):
    farm = busy_cuebot_farm
    seeding = back_to_the_scheduler_unseeded(farm, capture=django_capture_on_commit_callbacks, cuebot_cores=[1000] * 5)
    # The flag has committed and the scheduler may read it at once; the seeding has not run. The
    # stale counter (6 cores on the subscription against 56 booked) must not be booked against:
    # the subscription is closed (no burst).
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    assert seeded_redis.hmget(sub, "int_cores", "burst") == ["6", None]
    closed = book_cores(farm, cores=100)
    assert (closed.ok, closed.table, closed.limit) == (False, "subscription", 0)
    for callback in seeding:
        callback()
    # Seeded, then opened: bookings are judged against the true counts again (the job's 53
    # booked cores against its cap of 50 here).
    assert seeded_redis.hmget(sub, "int_cores", "burst") == ["56", "200"]
    seeded = book_cores(farm, cores=100)
    assert (seeded.ok, seeded.table, seeded.current, seeded.limit) == (False, "job", 53, 50)


@pytest.mark.django_db
def test_a_switch_to_the_scheduler_is_refused_when_redis_cannot_close_the_shows_keys(
    cuebot_farm,
    settings,
    fresh_accounting_client,
    django_capture_on_commit_callbacks,
):
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    with pytest.raises(SwitchRefused, match="could not be closed"), django_capture_on_commit_callbacks(execute=True):
        set_scheduler_managed(show=cuebot_farm.show, managed=True)
    assert not Show.objects.get(pk=cuebot_farm.show.pk).b_scheduler_managed


@pytest.mark.django_db
def test_a_closed_show_is_opened_only_by_a_limit_write_that_follows_its_counters(
    busy_cuebot_farm,
    seeded_redis,
    django_capture_on_commit_callbacks,
):
    farm = busy_cuebot_farm
    seeding = back_to_the_scheduler_unseeded(farm, capture=django_capture_on_commit_callbacks, cuebot_cores=[1000])
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    assert seeded_redis.sismember(keys.CLOSED_SHOWS, farm.show.id)

    # An operator's limit change meanwhile is refused and recorded; a limits-only reseed leaves
    # the subscription out. Either would open it on counters not seeded yet.
    with django_capture_on_commit_callbacks(execute=True):
        set_subscription_limits(subscription=farm.subscription, burst=30000)  # centicores
    reseed(limits=True, booked=False, show_ids=[farm.show.id])
    assert seeded_redis.hmget(sub, "int_cores", "burst") == ["6", None]
    assert seeded_redis.hexists(keys.LIMITS_REFUSED, sub)

    for callback in seeding:
        callback()
    assert seeded_redis.hmget(sub, "int_cores", "burst") == ["16", "300"]
    assert not seeded_redis.sismember(keys.CLOSED_SHOWS, farm.show.id)


@pytest.mark.django_db
def test_a_full_reseed_opens_a_show_whose_seeding_failed(
    busy_cuebot_farm, seeded_redis, django_capture_on_commit_callbacks
):
    farm = busy_cuebot_farm
    with django_capture_on_commit_callbacks(execute=False):  # its seeding never runs
        set_scheduler_managed(show=farm.show, managed=True)
    sub = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    reseed(show_ids=[farm.show.id])  # booked counters, then limits
    assert seeded_redis.hmget(sub, "int_cores", "burst") == ["6", "200"]
    assert not seeded_redis.sismember(keys.CLOSED_SHOWS, farm.show.id)


@pytest.mark.django_db
def test_a_switch_to_the_scheduler_schedules_a_settling_reseed_one_flag_ttl_later(
    cuebot_farm, settings, django_capture_on_commit_callbacks
):
    before = timezone.now()
    switch(cuebot_farm, managed=True, capture=django_capture_on_commit_callbacks)

    (schedule,) = Schedule.objects.filter(name=f"settle_reseed:{cuebot_farm.show.id}")
    window = timedelta(seconds=settings.SHOW_FLAG_CACHE_SECONDS)
    assert before + window <= schedule.next_run <= timezone.now() + window
    assert (schedule.func, ast.literal_eval(schedule.kwargs), schedule.schedule_type) == (
        "accounting.tasks.settle_reseed",
        {"show_id": cuebot_farm.show.id},
        Schedule.ONCE,
    )


def released_on_the_old_flag(farm, proc) -> None:
    """A release by a process whose flag cache still said Cuebot: the proc and the PG rows go,
    nothing is registered in flight and nothing reaches Redis."""
    with override_settings(ACCOUNTING_SCHEDULER="maestro"):  # the Maestro era's release: the five tables only
        unbook_proc(proc_id=proc.id)


@pytest.mark.django_db
def test_the_settling_reseed_takes_off_a_release_made_on_the_old_flag_after_the_seeding(
    cuebot_farm, acct_redis, django_capture_on_commit_callbacks
):
    cuebot_farm.add_proc(cores=200)
    late = cuebot_farm.add_proc(cores=300)
    switch(cuebot_farm, managed=True, capture=django_capture_on_commit_callbacks)
    released_on_the_old_flag(cuebot_farm, late)
    job_key = keys.job(job_id=cuebot_farm.job.id)
    assert acct_redis.hget(job_key, "int_cores") == "5"  # the seeding counted it: high

    settle_reseed(show_id=cuebot_farm.show.id)

    assert acct_redis.hget(job_key, "int_cores") == "2"
    assert not drift_report(show_ids=[cuebot_farm.show.id]).drifted


@pytest.mark.django_db
def test_the_settling_reseed_of_a_show_back_with_cuebot_writes_nothing(
    cuebot_farm, acct_redis, django_capture_on_commit_callbacks
):
    proc = cuebot_farm.add_proc(cores=300)
    switch(cuebot_farm, managed=True, capture=django_capture_on_commit_callbacks)
    switch(cuebot_farm, managed=False, capture=django_capture_on_commit_callbacks)
    unbook_proc(proc_id=proc.id)  # Cuebot's branch now: Redis keeps the counters it had
    job_key = keys.job(job_id=cuebot_farm.job.id)

    settle_reseed(show_id=cuebot_farm.show.id)

    assert acct_redis.hget(job_key, "int_cores") == "3"
