"""The trigger behaviour of the Cuebot-shaped schema, as docs/cuebot-schema.md states it."""

from decimal import Decimal

import pytest
from django.db import DatabaseError, transaction

from accounting.models import (
    FolderResource,
    HostLocal,
    JobResource,
    LayerResource,
    Point,
    Proc,
    Subscription,
)
from accounting.reconcile.recompute import recompute_pg_accounting
from shows.models import Folder, Host, HostStat, new_pk
from tests.farms import build_farm, unique

# Cuebot's own writes fire these triggers (inserting folders, jobs and procs, moving procs,
# deleting hosts): they run as Cuebot's role would, not the service's.
pytestmark = [pytest.mark.django_db, pytest.mark.superuser]


def refused(message: str):
    return pytest.raises(DatabaseError, match=message)


def test_inserting_a_folder_job_or_layer_creates_its_resource_row():
    farm = build_farm(managed=False)
    assert FolderResource.objects.get(folder=farm.folder).pk == farm.folder.pk
    assert JobResource.objects.get(job=farm.job).pk == farm.job.pk
    layer_resource = LayerResource.objects.get(layer=farm.layer)
    assert (layer_resource.pk, layer_resource.job_id) == (farm.layer.pk, farm.job.pk)


def test_a_folder_without_parent_becomes_default_and_a_child_does_not():
    farm = build_farm(managed=False)
    root = Folder.objects.create(show=farm.show, dept=farm.dept, str_name=unique("root"), b_default=False)
    child = Folder.objects.create(show=farm.show, dept=farm.dept, str_name="child", parent_folder=root)
    assert Folder.objects.get(pk=root.pk).b_default is True
    assert Folder.objects.get(pk=child.pk).b_default is False


def test_raising_a_subscription_past_its_burst_fails_but_lowering_the_burst_does_not():
    farm = build_farm(managed=False, size=100, burst=200)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=150)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_burst=100)  # a cap below current use is allowed
    with transaction.atomic(), refused("subscription has exceeded burst size"):
        Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=160)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=90)  # going down is fine


def test_raising_a_job_past_its_max_cores_or_gpus_fails():
    farm = build_farm(managed=False)
    JobResource.objects.filter(job=farm.job).update(int_max_cores=200, int_max_gpus=1)
    with transaction.atomic(), refused("job has exceeded max cores"):
        JobResource.objects.filter(job=farm.job).update(int_cores=300)
    with transaction.atomic(), refused("job has exceeded max GPU units"):
        JobResource.objects.filter(job=farm.job).update(int_gpus=2)
    JobResource.objects.filter(job=farm.job).update(int_cores=300, int_max_cores=400)  # cap moved in the same UPDATE


def test_a_host_or_host_local_idle_amount_below_zero_fails():
    farm = build_farm(managed=False, host_cores=800)
    with transaction.atomic(), refused("unable to allocate additional core units"):
        Host.objects.filter(pk=farm.host.pk).update(int_cores_idle=-100)
    with transaction.atomic(), refused("unable to allocate additional GPU units"):
        Host.objects.filter(pk=farm.host.pk).update(int_gpus_idle=-1)
    reservation = farm.local_reservation(host=farm.host, job_id=farm.job.id)
    with transaction.atomic(), refused("host local doesnt have enough idle cores"):
        HostLocal.objects.filter(pk=reservation.pk).update(int_cores_idle=-1)
    HostLocal.objects.filter(pk=reservation.pk).update(int_cores_max=0, int_cores_idle=-1)  # maxima changed: no check


def test_a_proc_of_zero_cores_cannot_be_inserted():
    farm = build_farm(managed=False)
    with transaction.atomic(), refused("tried to allocate 0 cores"):
        Proc.objects.create(
            host=farm.host, job=farm.job, show=farm.show, layer=farm.layer, int_cores_reserved=0, int_mem_reserved=1024
        )


def test_a_proc_needs_a_frame_that_exists():
    farm = build_farm(managed=False)
    with transaction.atomic(), pytest.raises(DatabaseError, match="c_proc_pk_frame"):
        Proc.objects.create(
            host=farm.host,
            job=farm.job,
            show=farm.show,
            layer=farm.layer,
            frame_id=new_pk(),
            int_cores_reserved=100,
            int_mem_reserved=1024,
        )


def test_float_tier_is_derived_on_update():
    farm = build_farm(managed=False, size=400, burst=800)
    farm.add_proc(cores=200)
    farm.add_proc(cores=100)
    assert Subscription.objects.get(pk=farm.subscription.pk).float_tier == Decimal("0.75")  # 300 of 400
    assert JobResource.objects.get(job=farm.job).float_tier == Decimal("3.00")  # 300 over a min of 100
    Point.objects.filter(show=farm.show).update(int_min_cores=600)
    assert Point.objects.get(show=farm.show).float_tier == Decimal("0.50")  # soft tier: 300 of a min of 600
    assert FolderResource.objects.get(folder=farm.folder).float_tier == Decimal("1.00")  # min 0: satisfied


def test_moving_a_proc_to_another_layer_moves_its_layer_cores():
    farm = build_farm(managed=False)
    proc = farm.add_proc(cores=300)
    _, other = farm.add_job()
    Proc.objects.filter(pk=proc.pk).update(layer=other)
    assert LayerResource.objects.get(layer=farm.layer).int_cores == 0
    assert LayerResource.objects.get(layer=other).int_cores == 300


def test_deleting_a_host_deletes_its_host_stat():
    farm = build_farm(managed=False)
    Host.objects.filter(pk=farm.host.pk).delete()
    assert not HostStat.objects.filter(host_id=farm.host.pk).exists()


def test_recompute_writes_the_true_sum_above_a_lowered_cap_and_keeps_the_caps():
    farm = build_farm(managed=False, size=100, burst=400)
    farm.add_proc(cores=300)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=0, int_burst=200)
    JobResource.objects.filter(job=farm.job).update(int_cores=0, int_max_cores=100)

    recompute_pg_accounting(show_ids=[farm.show.id])

    subscription = Subscription.objects.get(pk=farm.subscription.pk)
    job = JobResource.objects.get(job=farm.job)
    assert (subscription.int_cores, subscription.int_burst) == (300, 200)
    assert (job.int_cores, job.int_max_cores, job.int_max_gpus) == (300, 100, 100)
