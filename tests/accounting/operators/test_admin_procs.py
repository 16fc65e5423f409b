"""Procs in the admin: deleting one, or many with the action, is a release (unbook_procs);
adding is not offered; RELEASE_PROCS is required."""

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.urls import reverse
from django.utils import timezone

from accounting.live import keys
from accounting.models import Proc, Subscription
from accounting.reconcile.redis_against_pg import drift_report
from accounting.reconcile.reseed import seed_show
from shows.models import Host
from tests.farms import build_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]

CHANGELIST = reverse("admin:accounting_proc_changelist")


def delete_url(proc) -> str:
    return reverse("admin:accounting_proc_delete", args=[proc.pk])


def idle(farm) -> int:
    return Host.objects.get(pk=farm.host.pk).int_cores_idle


def test_deleting_a_proc_releases_it_and_leaves_no_drift(admin_client, acct_redis, django_capture_on_commit_callbacks):
    farm = build_farm(managed=True)
    kept, proc = farm.add_proc(cores=300), farm.add_proc(cores=250)
    seed_show(show_id=farm.show.id)
    idle_before = idle(farm)
    confirm = admin_client.get(delete_url(proc))
    assert confirm.status_code == 200 and farm.host.str_name in confirm.content.decode()
    assert "Deleting a proc <strong>releases</strong> it" in confirm.content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(delete_url(proc), {"post": "yes"})

    assert response.status_code == 302
    assert list(Proc.objects.values_list("pk", flat=True)) == [kept.pk]
    assert idle(farm) == idle_before + 250  # the host got its cores back
    assert acct_redis.hget(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores") == "3"
    assert drift_report(show_ids=[farm.show.id]).rows == []


def test_the_delete_action_releases_every_selected_proc(admin_client, django_capture_on_commit_callbacks):
    farm = build_farm(managed=False)
    procs = [farm.add_proc(cores=100), farm.add_proc(cores=200)]
    idle_before = idle(farm)
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(
            CHANGELIST, {"action": "delete_selected", ACTION_CHECKBOX_NAME: [p.pk for p in procs], "post": "yes"}
        )
    assert not Proc.objects.exists()
    assert idle(farm) == idle_before + 300
    assert Subscription.objects.get(pk=farm.subscription.pk).int_cores == 0  # Cuebot-managed: decremented in PG


def test_procs_are_never_added_or_edited(admin_client):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)
    assert admin_client.get(reverse("admin:accounting_proc_add")).status_code == 403
    page = admin_client.get(reverse("admin:accounting_proc_change", args=[proc.pk]))
    assert page.status_code == 200 and page.context["adminform"].form.fields == {}
    assert "2.5 cores" in page.content.decode()


def test_without_release_procs_a_staff_user_cannot_delete(client, django_user_model):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)
    viewer = django_user_model.objects.create_user(username="viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename__in=["view_proc", "delete_proc"]))
    client.force_login(viewer)
    listing = client.get(CHANGELIST)
    assert listing.status_code == 200 and "delete_selected" not in listing.context["cl"].model_admin.get_actions(
        listing.wsgi_request
    )
    assert client.post(delete_url(proc), {"post": "yes"}).status_code == 403
    client.post(CHANGELIST, {"action": "delete_selected", ACTION_CHECKBOX_NAME: [proc.pk], "post": "yes"})
    assert Proc.objects.filter(pk=proc.pk).exists()


def test_release_procs_alone_lets_an_operator_release(client, django_user_model, django_capture_on_commit_callbacks):
    farm = build_farm(managed=True)
    proc = farm.add_proc(cores=250)
    releaser = django_user_model.objects.create_user(username="releaser", password="pw", is_staff=True)
    releaser.user_permissions.add(Permission.objects.get(codename="release_proc"))
    client.force_login(releaser)
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(delete_url(proc), {"post": "yes"}).status_code == 302
    assert not Proc.objects.exists()


def test_a_procs_page_reads_its_memory_in_binary_units(admin_client, farm):
    from django.urls import reverse

    from accounting.operators.display import format_kb

    proc = farm.add_proc(cores=250, mem=4 * 1024 * 1024)
    page = admin_client.get(reverse("admin:accounting_proc_change", args=[proc.id])).content.decode()
    assert "4 GiB" in page and "4194304" not in page and "2.5 cores" in page
    assert [format_kb(kb) for kb in (512, 1536, 3 * 1024 * 1024 // 2)] == ["512 KiB", "1.5 MiB", "1.5 GiB"]


def test_the_proc_list_reads_job_and_layer_together_cores_and_gpus_together_and_a_short_booking_time(
    admin_client, farm
):
    proc = farm.add_proc(cores=250, gpus=1)
    listing = admin_client.get(CHANGELIST).content.decode()
    assert f"{farm.job.str_name} / {farm.layer.str_name}" in listing
    assert "2.5\u00a0cores, 1\u00a0GPU" in listing
    assert timezone.localtime(Proc.objects.get(pk=proc.pk).ts_booked).strftime("%Y-%m-%d %H:%M") in listing
