"""Limits in the admin: typed and shown in cores, saved through accounting.limits.changes (its checks
and its Redis publish), booked counters read-only, CHANGE_LIMITS required."""

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from accounting.live import keys
from accounting.models import FolderResource, JobResource, Point, Subscription
from tests.farms import build_farm

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("seeded_redis")]


def change_url(obj) -> str:
    return reverse(f"admin:accounting_{obj._meta.model_name}_change", args=[obj.pk])


def form_data(page) -> dict:
    """The change form's editable fields as the browser would send them back."""
    form = page.context["adminform"].form
    return {name: form[name].field.prepare_value(form[name].value()) for name in form.fields}


def visible_text(html: str) -> str:
    """What a person reads: tags (and the ids in their links) removed."""
    return re.sub(r"<[^>]*>", " ", html)


def staff(django_user_model, *codenames: str):
    user = django_user_model.objects.create_user(username="operator", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def test_subscription_form_shows_cores_with_the_unit_and_booked_read_only(admin_client):
    farm = build_farm(managed=True, size=16000, burst=32050, host_cores=8000)
    farm.add_proc(cores=7000)
    page = admin_client.get(change_url(farm.subscription))
    html = page.content.decode()
    form = page.context["adminform"].form
    assert set(form.fields) == {"int_size", "int_burst"}
    assert form["int_size"].field.prepare_value(form["int_size"].value()) == "160"
    assert form["int_burst"].field.prepare_value(form["int_burst"].value()) == "320.5"
    assert 'value="160"' in html and 'value="320.5"' in html
    assert "Size (cores)" in html and "In cores" in html
    assert "70 cores" in html  # booked, read-only
    assert f"{farm.show.str_name} / {farm.alloc.str_name}" in html  # the title, not ids
    assert farm.show.pk not in visible_text(html) and farm.alloc.pk not in visible_text(html)


def test_cores_typed_are_stored_as_centicores_and_published(
    admin_client, acct_redis, django_capture_on_commit_callbacks
):
    farm = build_farm(managed=True)
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(change_url(farm.subscription), {"int_size": "200", "int_burst": "250.5"})
    assert response.status_code == 302
    farm.subscription.refresh_from_db()
    assert (farm.subscription.int_size, farm.subscription.int_burst) == (20000, 25050)
    sub_key = keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id)
    assert acct_redis.hmget(sub_key, "size", "burst") == ["200", "250"]
    assert acct_redis.get(keys.SEQ) == "1"  # one limit write, through limit_write.lua


@pytest.mark.parametrize(
    ("size", "message"),
    [
        ("2.125", "at most two decimals"),
        ("-1", "-1 is not unlimited here"),
        ("unlimited", "-1 is not unlimited here"),
        ("99999999999999999999", "At most"),
        ("1000000000000", "At most"),  # fits the bigint column, not Cuebot's tier trigger (NUMERIC(16, 2))
        ("٣", "Enter a number of cores"),
        ("1e3", "Enter a number of cores"),
    ],
)
def test_refused_values_are_form_errors_and_change_nothing(admin_client, acct_redis, size, message):
    farm = build_farm(managed=True)
    response = admin_client.post(change_url(farm.subscription), {"int_size": size, "int_burst": "200"})
    assert response.status_code == 200
    assert message in str(response.context["adminform"].form.errors["int_size"])
    farm.subscription.refresh_from_db()
    assert (farm.subscription.int_size, farm.subscription.int_burst) == (10000, 20000)
    assert not acct_redis.exists(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id))


def test_folder_max_takes_unlimited_and_its_min_does_not(admin_client, acct_redis, django_capture_on_commit_callbacks):
    farm = build_farm(managed=True)
    resource = farm.folder_resource
    page = admin_client.get(change_url(resource))
    assert form_data(page)["int_max_cores"] == "unlimited"  # the trigger's default, -1
    assert f"{farm.show.str_name} / root" in page.content.decode()
    refused = admin_client.post(
        change_url(resource),
        {"int_min_cores": "unlimited", "int_max_cores": "8", "int_min_gpus": "0", "int_max_gpus": "-1"},
    )
    assert "int_min_cores" in refused.context["adminform"].form.errors
    fraction = admin_client.post(
        change_url(resource),
        {"int_min_cores": "1.5", "int_max_cores": "unlimited", "int_min_gpus": "1", "int_max_gpus": "-1"},
    )
    assert "whole cores" in str(fraction.context["adminform"].form.errors["int_min_cores"])  # as Cuebot keeps it
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(
            change_url(resource),
            {"int_min_cores": "1", "int_max_cores": "unlimited", "int_min_gpus": "1", "int_max_gpus": "-1"},
        )
    resource = FolderResource.objects.get(pk=resource.pk)
    assert (resource.int_min_cores, resource.int_max_cores, resource.int_min_gpus) == (100, -1, 1)
    assert acct_redis.hmget(keys.folder(folder_id=farm.folder.id), "int_min_cores", "int_max_cores") == ["1", "-1"]


def test_job_and_point_limits_in_cores(admin_client, acct_redis, django_capture_on_commit_callbacks):
    farm = build_farm(managed=True)
    point = Point.objects.get(show=farm.show)
    with django_capture_on_commit_callbacks(execute=True):
        admin_client.post(
            change_url(farm.job.resource), {"int_max_cores": "19", "int_max_gpus": "2", "int_priority": "50"}
        )
        admin_client.post(change_url(point), {"int_min_cores": "3", "int_min_gpus": "0"})
    assert JobResource.objects.get(pk=farm.job.resource.pk).int_max_cores == 1900
    assert Point.objects.get(pk=point.pk).int_min_cores == 300
    assert acct_redis.hget(keys.job(job_id=farm.job.id), "int_max_cores") == "19"
    assert acct_redis.hget(keys.point(dept_id=farm.dept.id, show_id=farm.show.id), "int_min_cores") == "3"


def test_a_count_beyond_its_column_is_a_form_error_not_a_500(admin_client):
    farm = build_farm(managed=False)
    response = admin_client.post(
        change_url(farm.job.resource), {"int_max_cores": "100", "int_max_gpus": "2147483648", "int_priority": "1"}
    )
    assert response.status_code == 200 and "int_max_gpus" in response.context["adminform"].form.errors


def test_lists_name_the_show_and_sort_by_it(admin_client):
    second, first = build_farm(managed=False), build_farm(managed=True)
    Subscription.objects.filter(pk=second.subscription.pk).update(int_size=25050)
    listing = admin_client.get(reverse("admin:accounting_subscription_changelist"))
    names = [str(sub.show) for sub in listing.context["cl"].result_list]
    assert names == sorted(names)
    assert "250.5 (" in listing.content.decode()  # the size (burst) column, in cores
    folders = admin_client.get(
        reverse("admin:accounting_folderresource_changelist"), {"folder__show__id__exact": first.show.pk}
    )
    assert [r.folder.show_id for r in folders.context["cl"].result_list] == [first.show.pk]
    assert first.show.str_name in folders.content.decode()


def test_without_change_limits_the_form_is_read_only(client, django_user_model):
    farm = build_farm(managed=True)
    client.force_login(staff(django_user_model, "view_subscription"))
    page = client.get(change_url(farm.subscription))
    assert page.status_code == 200 and page.context["adminform"].form.fields == {}
    assert "100 cores" in page.content.decode() and "10000" not in page.content.decode()  # shown in cores, as text
    assert client.post(change_url(farm.subscription), {"int_size": "1", "int_burst": "1"}).status_code == 403
    assert Subscription.objects.get(pk=farm.subscription.pk).int_size == 10000


def test_change_limits_alone_lets_an_operator_edit(client, django_user_model, django_capture_on_commit_callbacks):
    farm = build_farm(managed=True)
    client.force_login(staff(django_user_model, "change_limits"))
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(change_url(farm.subscription), {"int_size": "1", "int_burst": "2"})
    assert response.status_code == 302
    assert Subscription.objects.get(pk=farm.subscription.pk).int_size == 100


@pytest.mark.parametrize("model", ["subscription", "folderresource", "jobresource", "layerresource", "point"])
def test_accounting_rows_are_never_added_or_deleted_here(admin_client, model):
    build_farm(managed=True)
    listing = admin_client.get(reverse(f"admin:accounting_{model}_changelist"))
    assert listing.status_code == 200
    assert admin_client.get(reverse(f"admin:accounting_{model}_add")).status_code == 403
    assert "delete_selected" not in listing.context["cl"].model_admin.get_actions(listing.wsgi_request)


@pytest.mark.parametrize(
    ("tier", "booked", "base", "soft", "reads"),
    [
        ("0.44", 7000, 16000, False, "0.44 (70 booked ÷ 160 size, cores; "),
        ("-16000", 0, 16000, False, "-16000 (nothing booked: Cuebot ranks it first (minus the size in centicores); "),
        ("3", 200, 0, False, "3 (no size: booked + 1; "),
        ("1", 500, 200, True, "1 (5 booked ÷ 2 size, cores: the size is met, so 1; "),
    ],
)
def test_a_tier_reads_with_what_it_is_made_of(tier, booked, base, soft, reads):
    """Cuebot's float_tier (shows/cuebot_schema/triggers.sql) never reads bare: its booked
    cores and base, or in words what Cuebot's special values mean."""
    from decimal import Decimal
    from types import SimpleNamespace

    from accounting.operators.display import tier_column

    column = tier_column(base="int_size", base_label="size", soft=soft)
    row = SimpleNamespace(float_tier=Decimal(tier), int_cores=booked, int_size=base)
    assert column(None, row).startswith(reads) and column(None, row).endswith("Cuebot books the lowest tier first)")


def test_gpu_columns_and_caps_read_as_gpus_and_a_folders_minus_one_as_unlimited(
    admin_client, client, django_user_model
):
    farm = build_farm(managed=True)
    FolderResource.objects.filter(folder=farm.folder).update(int_max_gpus=-1, int_min_gpus=2)
    JobResource.objects.filter(job=farm.job).update(int_max_gpus=1)

    folders = visible_text(admin_client.get(reverse("admin:accounting_folderresource_changelist")).content.decode())
    # One column per role, cores and GPUs together, so the list fits beside the sidebar and filter.
    assert "0\u00a0cores, 2\u00a0GPUs" in folders and "unlimited\u00a0cores, unlimited\u00a0GPUs" in folders
    assert "Int max gpus" not in folders and "Int gpus" not in folders
    jobs = visible_text(admin_client.get(reverse("admin:accounting_jobresource_changelist")).content.decode())
    assert "cores, 1\u00a0GPU" in jobs and "Int max gpus" not in jobs

    page = admin_client.get(change_url(FolderResource.objects.get(folder=farm.folder)))
    form = page.context["adminform"].form
    assert (form.fields["int_max_gpus"].label, form.fields["int_max_gpus"].help_text) == (
        "Max GPUs",
        "Whole GPUs. -1 or 'unlimited' for no limit.",
    )
    assert form.fields["int_min_gpus"].help_text == "Whole GPUs."
    assert 'name="int_max_gpus" value="unlimited"' in page.content.decode()  # as the max cores beside it reads
    job_form = admin_client.get(change_url(JobResource.objects.get(job=farm.job))).context["adminform"].form
    assert job_form.fields["int_max_gpus"].help_text == "Whole GPUs."  # a job's -1 is compared as a number

    client.force_login(staff(django_user_model, "view_folderresource"))
    read_only = visible_text(client.get(change_url(FolderResource.objects.get(folder=farm.folder))).content.decode())
    assert "Max GPUs" in read_only and "unlimited" in read_only and "-1" not in read_only


def test_a_folders_max_gpus_takes_unlimited_and_a_jobs_refuses_minus_one(
    admin_client, django_capture_on_commit_callbacks
):
    farm = build_farm(managed=False)
    folder = FolderResource.objects.get(folder=farm.folder)
    FolderResource.objects.filter(pk=folder.pk).update(int_max_gpus=4)
    data = form_data(admin_client.get(change_url(folder))) | {"int_max_gpus": "unlimited"}
    with django_capture_on_commit_callbacks(execute=True):
        assert admin_client.post(change_url(folder), data).status_code == 302
    assert FolderResource.objects.get(pk=folder.pk).int_max_gpus == -1

    job = JobResource.objects.get(job=farm.job)
    data = form_data(admin_client.get(change_url(job))) | {"int_max_gpus": "-1"}
    refused = admin_client.post(change_url(job), data)
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["int_max_gpus"] == [
        "Use a value of 0 or more (-1 is not unlimited here)."
    ]
    assert JobResource.objects.get(pk=job.pk).int_max_gpus == job.int_max_gpus
