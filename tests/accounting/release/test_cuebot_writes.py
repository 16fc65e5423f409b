"""A release writes what Cuebot's own release writes, beside Cuebot, under its triggers."""

import pytest
from django.db import connection
from prometheus_client import REGISTRY

from accounting.live import keys
from accounting.models import (
    FolderResource,
    HostLocal,
    JobResource,
    LayerResource,
    Point,
    Proc,
    Subscription,
)
from accounting.release.types import Branch
from accounting.release.unbook import unbook_proc, unbook_procs
from shows.models import Alloc, Host, HostStat, Job, Show
from tests.accounting.release.test_unbook import (
    booked,
    hashes,
    host_idle,
    seed_keys,
)
from tests.farms import build_farm, unique
from tests.infra.test_transactions import behind_cuebot, retries
from tests.service_role import as_cuebot

pytestmark = pytest.mark.django_db


def jobs_gone(branch: str) -> float:
    return REGISTRY.get_sample_value("cuebot_acct_release_job_gone_total", {"branch": branch}) or 0.0


def test_a_local_release_gives_its_amounts_back_to_the_jobs_host_local_reservation(cuebot_farm):
    cuebot_farm.add_proc(cores=300, gpus=1, mem=2048, local=True)
    proc = cuebot_farm.add_proc(cores=250, gpus=1, mem=1024, local=True)
    reservation = HostLocal.objects.get(host=cuebot_farm.host, job=cuebot_farm.job)
    assert (reservation.int_cores_idle, reservation.int_mem_idle, reservation.int_gpus_idle) == (
        reservation.int_cores_max - 550,
        reservation.int_mem_max - 3072,
        reservation.int_gpus_max - 2,
    )

    assert unbook_proc(proc_id=proc.id).branch is Branch.LOCAL

    reservation.refresh_from_db()
    assert (reservation.int_cores_idle, reservation.int_mem_idle, reservation.int_gpus_idle) == (
        reservation.int_cores_max - 300,
        reservation.int_mem_max - 2048,
        reservation.int_gpus_max - 1,
    )
    assert booked(cuebot_farm)["job_local"] == (300, 1)


@pytest.mark.parametrize("managed", [False, True], ids=["cuebot-managed", "scheduler-managed"])
@pytest.mark.parametrize("batch", [False, True], ids=["single", "batch"])
def test_a_finished_jobs_local_reservation_is_removed_when_one_of_its_local_procs_goes(managed, batch):
    """BookingManagerService.removeInactiveLocalHostAssignment, run by Cuebot's unbookProc for a
    local proc: once the job is FINISHED (or its row gone), its host_local row is deleted."""
    farm = build_farm(managed=managed)
    running_job, running_layer = farm.add_job()
    finished = [farm.add_proc(cores=100, local=True), farm.add_proc(cores=200, local=True)]
    running = farm.add_proc(cores=100, local=True, layer=running_layer)
    with as_cuebot():
        Job.objects.filter(pk=farm.job.pk).update(str_state="FINISHED")

    if batch:
        unbook_procs(proc_ids=[finished[0].id, running.id])
    else:
        unbook_proc(proc_id=finished[0].id)
        unbook_proc(proc_id=running.id)

    assert not HostLocal.objects.filter(host=farm.host, job=farm.job).exists()
    assert HostLocal.objects.filter(host=farm.host, job=running_job).exists()  # its job still runs
    assert unbook_proc(proc_id=finished[1].id).branch is Branch.LOCAL  # the last one goes all the same


def test_a_running_jobs_local_reservation_stays(cuebot_farm):
    proc = cuebot_farm.add_proc(cores=100, local=True)
    unbook_proc(proc_id=proc.id)
    assert HostLocal.objects.filter(host=cuebot_farm.host, job=cuebot_farm.job).exists()


def test_a_cuebot_managed_proc_whose_job_is_gone_is_released_and_what_can_be_resolved_taken_off(
    cuebot_farm, django_capture_on_commit_callbacks
):
    proc = cuebot_farm.add_proc(cores=400, gpus=1, mem=4096)
    idle = host_idle(cuebot_farm)
    folder_before = booked(cuebot_farm)["folder"]
    cuebot_farm.delete_job_as_cuebot_does(job=cuebot_farm.job)
    counted = jobs_gone("cuebot")

    with django_capture_on_commit_callbacks(execute=True):  # the count is taken at commit
        release = unbook_proc(proc_id=proc.id)

    assert release is not None and release.job_gone
    assert not Proc.objects.filter(pk=proc.id).exists()
    assert host_idle(cuebot_farm) == (idle[0] + 400, idle[1] + 4096, idle[2] + 1, idle[3])
    assert Subscription.objects.filter(pk=cuebot_farm.subscription.pk).values_list("int_cores", "int_gpus").get() == (
        0,
        0,
    )
    # The folder and point cannot be named without the job: they keep counting it (the next recompute heals).
    assert (
        tuple(FolderResource.objects.filter(folder=cuebot_farm.folder).values_list("int_cores", "int_gpus").get())
        == folder_before
    )
    assert jobs_gone("cuebot") == counted + 1


def test_a_scheduler_managed_proc_whose_job_is_gone_is_taken_off_the_keys_it_can_name(
    farm, seeded_redis, django_capture_on_commit_callbacks
):
    proc = farm.add_proc(cores=300, gpus=1)
    names = seed_keys(seeded_redis, farm, cores=3, gpus=1)
    farm.delete_job_as_cuebot_does(job=farm.job)

    with django_capture_on_commit_callbacks(execute=True):
        release = unbook_proc(proc_id=proc.id)

    assert release.branch is Branch.SCHEDULER and release.job_gone
    after = hashes(seeded_redis, names)
    assert {role: after[role]["int_cores"] for role in names} == {
        "sub": "0",
        "job": "0",
        "layer": "0",
        "folder": "3",
        "point": "3",
    }


def test_the_point_taken_off_is_the_jobs_show_not_the_procs(cuebot_farm):
    """Cuebot counts a proc against the point of its job's department and its job's show."""
    with as_cuebot():
        other = Show.objects.create(str_name=unique("show"))
        Subscription.objects.create(show=other, alloc=cuebot_farm.alloc, int_size=10000, int_burst=20000)
        Point.objects.create(show=other, dept=cuebot_farm.dept, int_cores=500)
        proc = cuebot_farm.add_proc(cores=200)
        Proc.objects.filter(pk=proc.pk).update(show=other)
        Subscription.objects.filter(show=other).update(int_cores=200)

    unbook_proc(proc_id=proc.id)

    assert Point.objects.get(show=cuebot_farm.show, dept=cuebot_farm.dept).int_cores == 0
    assert Point.objects.get(show=other, dept=cuebot_farm.dept).int_cores == 500


def test_the_point_key_published_is_the_jobs_show(farm, seeded_redis, django_capture_on_commit_callbacks):
    with as_cuebot():
        other = Show.objects.create(str_name=unique("show"), b_scheduler_managed=True)
        proc = farm.add_proc(cores=200)
        Proc.objects.filter(pk=proc.pk).update(show=other)
    job_point = keys.point(dept_id=farm.dept.id, show_id=farm.show.id)
    proc_point = keys.point(dept_id=farm.dept.id, show_id=other.id)
    for name in (job_point, proc_point):
        seeded_redis.hset(name, mapping={"int_cores": 5, "int_gpus": 0})

    with django_capture_on_commit_callbacks(execute=True):
        unbook_proc(proc_id=proc.id)

    assert (seeded_redis.hget(job_point, "int_cores"), seeded_redis.hget(proc_point, "int_cores")) == ("3", "5")


@pytest.mark.django_db(transaction=True)
def test_a_release_beside_a_cuebot_ordered_release_of_the_same_job_waits_instead_of_deadlocking():
    """Cuebot's release order: host, subscription, layer_resource, job_resource, folder_resource,
    point. A Cuebot transaction releasing one proc of a job holds layer and job rows when this
    service's release of another proc of that job (another host, another allocation) starts; the
    release must wait for it, not take folder_resource first and close a cycle."""
    farm = build_farm(managed=False)
    with as_cuebot():
        alloc2 = Alloc.objects.create(str_name=unique("alloc"), facility=farm.alloc.facility, str_tag="other")
        Subscription.objects.create(show=farm.show, alloc=alloc2, int_size=10000, int_burst=20000)
        host2 = Host.objects.create(
            alloc=alloc2,
            str_name=unique("host"),
            str_lock_state="OPEN",
            int_cores=800,
            int_cores_idle=800,
            int_mem=10**7,
            int_mem_idle=10**7,
        )
        HostStat.objects.create(host=host2)
    ours = farm.add_proc(cores=100)
    cuebots = farm.add_proc(cores=100, host=host2)
    before = retries("release")

    def cuebot_release(cursor) -> None:  # Cuebot's own role, to its job_resource row
        cursor.execute("DELETE FROM proc WHERE pk_proc = %s", [cuebots.id])
        cursor.execute("UPDATE host SET int_cores_idle = int_cores_idle + 100 WHERE pk_host = %s", [host2.id])
        cursor.execute(
            "UPDATE subscription SET int_cores = int_cores - 100 WHERE pk_show = %s AND pk_alloc = %s",
            [farm.show.id, alloc2.id],
        )
        cursor.execute("UPDATE layer_resource SET int_cores = int_cores - 100 WHERE pk_layer = %s", [farm.layer.id])
        cursor.execute("UPDATE job_resource SET int_cores = int_cores - 100 WHERE pk_job = %s", [farm.job.id])

    def cuebot_finish(cursor) -> None:
        cursor.execute("UPDATE folder_resource SET int_cores = int_cores - 100 WHERE pk_folder = %s", [farm.folder.id])
        cursor.execute(
            "UPDATE point SET int_cores = int_cores - 100 WHERE pk_show = %s AND pk_dept = %s",
            [farm.show.id, farm.dept.id],
        )

    released = behind_cuebot(holds=cuebot_release, then=cuebot_finish, waiter=lambda: unbook_proc(proc_id=ours.id))

    assert released is not None
    assert retries("release") == before  # no 40P01, no rerun
    assert JobResource.objects.get(job=farm.job).int_cores == 0
    assert LayerResource.objects.get(layer=farm.layer).int_cores == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("managed", [True, False], ids=["scheduler-managed", "cuebot-managed"])
def test_a_batch_waiting_on_procs_cuebot_is_updating_releases_them_at_their_newest_version(managed):
    """Cuebot updates running procs' rows (its memory and ping reports) while a batch release waits
    on their locks: the batch deletes the rows as they are once Cuebot commits, every one of them
    (a DELETE by the ctid the lock returned would skip them: unbook.py's lock-order comment), and
    gives their hosts back once."""
    farm = build_farm(managed=managed)
    procs = [farm.add_proc(cores=100) for _ in range(3)]
    ids = [p.id for p in procs]
    idle_before = Host.objects.get(pk=farm.host.pk).int_cores_idle

    def cuebot_reports(cursor) -> None:
        cursor.execute("UPDATE proc SET ts_ping = now() WHERE pk_proc = ANY(%s)", [ids])

    released = behind_cuebot(holds=cuebot_reports, waiter=lambda: unbook_procs(proc_ids=ids))

    assert [r.proc_id for r in released] == ids
    assert not Proc.objects.filter(pk__in=ids).exists()
    assert Host.objects.get(pk=farm.host.pk).int_cores_idle == idle_before + 300


def test_a_recompute_sets_every_row_it_can_and_reports_the_rest(cuebot_farm):
    """A sum beyond an integer column's range fails for that row only."""
    from accounting.reconcile.recompute import recompute_pg_accounting

    with as_cuebot():
        alloc2 = Alloc.objects.create(str_name=unique("alloc"), facility=cuebot_farm.alloc.facility, str_tag="big")
        big_sub = Subscription.objects.create(show=cuebot_farm.show, alloc=alloc2, int_size=10**12, int_burst=10**12)
        big_host = Host.objects.create(
            alloc=alloc2,
            str_name=unique("host"),
            str_lock_state="OPEN",
            int_cores=10**12,
            int_cores_idle=10**12,
            int_mem=10**7,
            int_mem_idle=10**7,
        )
        with connection.cursor() as cursor:  # as a scheduler booking would insert it: no recompute
            cursor.execute(
                "INSERT INTO frame (pk_frame, pk_layer, pk_job, str_name, str_state, int_number, int_layer_order) "
                "VALUES ('f-big', %s, %s, 'big', 'RUNNING', 1, 0)",
                [cuebot_farm.layer.id, cuebot_farm.job.id],
            )
            cursor.execute(
                "INSERT INTO proc (pk_proc, pk_host, pk_job, pk_show, pk_layer, pk_frame, int_cores_reserved, "
                "int_mem_reserved) VALUES ('p-big', %s, %s, %s, %s, 'f-big', %s, 1)",
                [big_host.id, cuebot_farm.job.id, cuebot_farm.show.id, cuebot_farm.layer.id, 3 * 10**9],
            )
        cuebot_farm.add_proc(cores=200)  # its recompute already reports the rows it could not set
        Subscription.objects.filter(pk=cuebot_farm.subscription.pk).update(int_cores=0)

    failures = recompute_pg_accounting(show_ids=[cuebot_farm.show.id])

    assert sorted((f.table, f.pk) for f in failures) == sorted(
        [
            ("subscription", big_sub.pk),
            ("folder_resource", cuebot_farm.folder.pk),
            ("point", Point.objects.get(show=cuebot_farm.show).pk),
        ]
    )
    assert all("integer out of range" in f.error for f in failures)
    assert Subscription.objects.get(pk=cuebot_farm.subscription.pk).int_cores == 200
    assert JobResource.objects.get(job=cuebot_farm.job).int_cores == 3 * 10**9 + 200  # bigint: set
    assert LayerResource.objects.get(layer=cuebot_farm.layer).int_cores == 3 * 10**9 + 200
