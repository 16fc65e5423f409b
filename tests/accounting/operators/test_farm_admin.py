import pytest
from django.contrib import admin
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounting.live import keys
from accounting.models import Subscription
from accounting.operators.farm_admin import ShowAdmin
from accounting.ownership import switching
from accounting.reconcile.drift_check import run_check
from accounting.reconcile.redis_against_pg import REDIS_FIELDS
from accounting.reconcile.reseed import seed_show
from accounting.reconcile.tables_against_procs import CUEBOT_TABLES
from settings import caches_for
from shows.models import Show
from tests.farms import build_farm
from tests.processes import closed_port

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:shows_show_changelist")


@pytest.fixture(autouse=True)
def no_real_seeding(monkeypatch):
    monkeypatch.setattr(switching, "seed_show", lambda *, show_id: None)


def flags(*shows) -> list[bool]:
    return [Show.objects.get(pk=show.pk).b_scheduler_managed for show in shows]


def test_the_list_shows_the_flag_with_a_filter(admin_client, farm, cuebot_farm):
    page = admin_client.get(CHANGELIST, {"b_scheduler_managed__exact": "1"})
    assert page.status_code == 200
    assert farm.show.str_name in page.content.decode() and cuebot_farm.show.str_name not in page.content.decode()


def test_move_to_scheduler_asks_first_and_changes_nothing_until_confirmed(admin_client, cuebot_farm):
    page = admin_client.post(CHANGELIST, {"action": "move_to_scheduler", ACTION_CHECKBOX_NAME: [cuebot_farm.show.pk]})
    assert page.status_code == 200
    assert "Move 1 show(s) to the scheduler?" in page.content.decode()
    assert cuebot_farm.show.str_name in page.content.decode()
    assert flags(cuebot_farm.show) == [False]


def test_move_to_scheduler_once_confirmed(admin_client, cuebot_farm, farm, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            CHANGELIST,
            {
                "action": "move_to_scheduler",
                ACTION_CHECKBOX_NAME: [cuebot_farm.show.pk, farm.show.pk],
                "confirmed": "yes",
            },
            follow=True,
        )
    assert flags(cuebot_farm.show, farm.show) == [True, True]
    messages = [str(m) for m in response.context["messages"]]
    assert messages == [f"Moved 1 show(s) to the scheduler: {cuebot_farm.show.str_name}. 1 already there."]


def test_move_back_to_cuebot_once_confirmed(admin_client, farm, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            CHANGELIST,
            {
                "action": "move_back_to_cuebot",
                ACTION_CHECKBOX_NAME: [farm.show.pk],
                "confirmed": "yes",
            },
            follow=True,
        )
    assert flags(farm.show) == [False]
    assert [str(m) for m in response.context["messages"]] == [
        f"Moved 1 show(s) to Cuebot: {farm.show.str_name}. 0 already there."
    ]


def test_a_user_without_change_permission_cannot_toggle(client, django_user_model, farm):
    viewer = django_user_model.objects.create_user(username="viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename="view_show"))
    client.force_login(viewer)
    client.post(CHANGELIST, {"action": "move_back_to_cuebot", ACTION_CHECKBOX_NAME: [farm.show.pk], "confirmed": "yes"})
    assert flags(farm.show) == [True]


def test_show_list_reads_like_an_operator_and_links_each_show_to_the_drift_its_era_checks(
    admin_client, farm, cuebot_farm
):
    """Redis era: the flagged show's acct:* fields, the other's Cuebot rows; both on the show's drift page."""
    page = admin_client.get("/admin/shows/show/").content.decode()
    assert "Scheduler managed" in page and "B scheduler managed" not in page
    for show in (farm.show, cuebot_farm.show):
        assert f"/admin/accounting/drift/{show.id}/" in page
        assert admin_client.get(f"/admin/accounting/drift/{show.id}/").status_code == 200


def staff_with(django_user_model, username: str, *codenames: str):
    user = django_user_model.objects.create_user(username=username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def test_ownership_actions_need_change_ownership(client, django_user_model, farm, django_capture_on_commit_callbacks):
    client.force_login(staff_with(django_user_model, "editor", "view_show", "change_show"))
    listing = client.get(CHANGELIST)
    assert "move_back_to_cuebot" not in listing.context["cl"].model_admin.get_actions(listing.wsgi_request)
    client.post(CHANGELIST, {"action": "move_back_to_cuebot", ACTION_CHECKBOX_NAME: [farm.show.pk], "confirmed": "yes"})
    assert flags(farm.show) == [True]

    client.force_login(staff_with(django_user_model, "owner", "view_show", "change_ownership"))
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            CHANGELIST, {"action": "move_back_to_cuebot", ACTION_CHECKBOX_NAME: [farm.show.pk], "confirmed": "yes"}
        )
    assert flags(farm.show) == [False]


def test_the_show_form_never_flips_ownership_and_takes_defaults_in_cores(admin_client, cuebot_farm):
    url = reverse("admin:shows_show_change", args=[cuebot_farm.show.pk])
    form = admin_client.get(url).context["adminform"].form
    assert "b_scheduler_managed" not in form.fields
    assert form["int_default_max_cores"].field.prepare_value(form["int_default_max_cores"].value()) == "100"
    data = {
        "str_name": cuebot_farm.show.str_name,
        "int_default_min_cores": "1.5",
        "int_default_max_cores": "200",
        "int_default_min_gpus": "100",
        "int_default_max_gpus": "100000",
        "b_active": "on",
        "b_booking_enabled": "on",
        "b_dispatch_enabled": "on",
        "b_scheduler_managed": "on",
    }
    assert admin_client.post(url, data).status_code == 302
    show = Show.objects.get(pk=cuebot_farm.show.pk)
    assert (show.int_default_min_cores, show.int_default_max_cores, show.b_scheduler_managed) == (150, 20000, False)


def test_the_drift_column_says_what_the_last_check_found(admin_client, farm, seeded_redis):
    assert "not checked yet" in admin_client.get(CHANGELIST).content.decode()
    seed_show(show_id=farm.show.id)
    seeded_redis.hset(keys.sub(show_id=farm.show.id, alloc_id=farm.alloc.id), "int_cores", 9)
    run_check(REDIS_FIELDS)
    assert "1 field(s) differ" in admin_client.get(CHANGELIST).content.decode()


def test_in_the_maestro_era_the_drift_column_counts_cuebots_rows_for_a_flagged_show_too(
    admin_client, maestro_era, farm
):
    farm.add_proc(cores=250)
    Subscription.objects.filter(pk=farm.subscription.pk).update(int_cores=900)
    run_check(CUEBOT_TABLES)
    page = admin_client.get(CHANGELIST).content.decode()
    assert "1 row(s) differ" in page and "Redis" not in page


def test_in_the_notify_era_a_flagged_shows_counters_are_the_schedulers_and_no_drift_is_claimed(
    admin_client, notify_era, farm, cuebot_farm
):
    run_check(CUEBOT_TABLES)
    column = ShowAdmin(Show, admin.site).get_list_display(RequestFactory().get(CHANGELIST))[-1]
    assert column(farm.show) == "-"
    assert ">none</a>" in column(cuebot_farm.show)


def test_the_show_list_reads_the_drift_checks_once_a_page_not_once_a_show(admin_client, settings, maestro_era, farm):
    """The Maestro era without Redis keeps the checks' statuses in the database cache: a read per
    row was a query per show on the page."""
    settings.CACHES = caches_for(cache_url="", broker_url="")
    run_check(CUEBOT_TABLES)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(CHANGELIST).status_code == 200
        return len(captured)

    few = queries()
    for _ in range(5):
        build_farm(managed=False)
    assert queries() == few


def test_forms_label_fields_without_opencues_prefixes_or_abbreviations(admin_client, farm):
    page = admin_client.get(
        reverse("admin:accounting_subscription_change", args=[farm.subscription.pk])
    ).content.decode()
    assert "Allocation:" in page and "GPUs:" in page
    assert "Alloc:" not in page and "Gpus:" not in page


def test_a_show_save_writes_only_the_columns_the_operator_changed(admin_client, cuebot_farm):
    url = reverse("admin:shows_show_change", args=[cuebot_farm.show.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].field.prepare_value(form[name].value()) for name in form.fields}
    data = {name: value for name, value in data.items() if value not in (False, None)}
    data = {name: ("on" if value is True else value) for name, value in data.items()}
    data |= {f"initial-{name}": value for name, value in data.items()}  # as the page renders them
    data["int_default_max_cores"] = "250"
    # Another writer (cueadmin pausing the show) commits between the form's GET and its POST.
    Show.objects.filter(pk=cuebot_farm.show.pk).update(b_paused=True)

    with CaptureQueriesContext(connection) as queries:
        assert admin_client.post(url, data).status_code == 302

    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "show"')]
    assert len(updates) == 1 and updates[0].startswith('UPDATE "show" SET "int_default_max_cores" = ')
    show = Show.objects.get(pk=cuebot_farm.show.pk)
    assert (show.int_default_max_cores, show.b_paused) == (25000, True)


def shown_form(admin_client, show) -> tuple[str, dict[str, str]]:
    """The show's change page, and its form's data as the browser would post it back unchanged."""
    url = reverse("admin:shows_show_change", args=[show.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {name: form[name].field.prepare_value(form[name].value()) for name in form.fields}
    data = {name: ("on" if value is True else str(value)) for name, value in data.items() if value not in (False, None)}
    return url, data | {f"initial-{name}": value for name, value in data.items()}


def test_the_show_form_reads_its_default_gpus_as_whole_gpus(admin_client, cuebot_farm):
    """Cuebot keeps a show's default GPUs as counts (its defaults 100 and 100000 are 100 and
    100000 GPUs, not hundredths like the cores beside them), and books nothing against them."""
    page = admin_client.get(reverse("admin:shows_show_change", args=[cuebot_farm.show.pk]))
    form = page.context["adminform"].form
    for name, label, stored in (
        ("int_default_min_gpus", "Default min GPUs", 100),
        ("int_default_max_gpus", "Default max GPUs", 100000),
    ):
        field = form[name]
        assert (field.label, field.value()) == (label, stored)
        assert field.help_text == (
            f"Whole GPUs, as typed: Cuebot keeps only cores in hundredths, so its default here, "
            f"{stored}, is {stored} GPUs. No booking compares against it."
        )
        assert field.help_text in page.content.decode()


def test_a_shows_default_gpus_take_whole_counts_and_refuse_minus_one(admin_client, cuebot_farm):
    url, data = shown_form(admin_client, cuebot_farm.show)
    refused = admin_client.post(url, data | {"int_default_max_gpus": "-1"})
    assert refused.status_code == 200
    assert refused.context["adminform"].form.errors["int_default_max_gpus"] == [
        "-1 is not unlimited here (Cuebot keeps this default as a plain count): enter 0 or more GPUs."
    ]
    assert (
        "int_default_min_gpus"
        in admin_client.post(url, data | {"int_default_min_gpus": "1.5"}).context["adminform"].form.errors
    )
    assert Show.objects.filter(pk=cuebot_farm.show.pk).values_list(
        "int_default_min_gpus", "int_default_max_gpus"
    ).get() == (100, 100000)


def test_a_show_default_gpus_change_writes_that_column_only(admin_client, cuebot_farm):
    url, data = shown_form(admin_client, cuebot_farm.show)
    Show.objects.filter(pk=cuebot_farm.show.pk).update(int_default_min_gpus=3)  # Cuebot's own change meanwhile

    with CaptureQueriesContext(connection) as queries:
        assert admin_client.post(url, data | {"int_default_max_gpus": "8"}).status_code == 302

    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('UPDATE "show"')]
    assert len(updates) == 1 and updates[0].startswith('UPDATE "show" SET "int_default_max_gpus" = ')
    assert Show.objects.filter(pk=cuebot_farm.show.pk).values_list(
        "int_default_min_gpus", "int_default_max_gpus"
    ).get() == (3, 8)


def test_a_read_only_show_page_says_its_default_gpus_in_gpus(client, django_user_model, cuebot_farm):
    client.force_login(staff_with(django_user_model, "viewer", "view_show"))
    html = client.get(reverse("admin:shows_show_change", args=[cuebot_farm.show.pk])).content.decode()
    assert "100 GPUs" in html and "100000 GPUs" in html


def test_shows_are_neither_added_nor_deleted_nor_renamed_here(admin_client, cuebot_farm):
    assert admin_client.get(reverse("admin:shows_show_add")).status_code == 403
    assert admin_client.get(reverse("admin:shows_show_delete", args=[cuebot_farm.show.pk])).status_code == 403
    form = admin_client.get(reverse("admin:shows_show_change", args=[cuebot_farm.show.pk])).context["adminform"].form
    assert "str_name" not in form.fields


@pytest.mark.parametrize("model", ["host", "job", "layer", "folder", "alloc", "dept", "facility"])
def test_cuebots_other_farm_rows_are_shown_read_only(admin_client, cuebot_farm, model):
    row = {
        "host": cuebot_farm.host,
        "job": cuebot_farm.job,
        "layer": cuebot_farm.layer,
        "folder": cuebot_farm.folder,
        "alloc": cuebot_farm.alloc,
        "dept": cuebot_farm.dept,
        "facility": cuebot_farm.alloc.facility,
    }[model]
    url = reverse(f"admin:shows_{model}_change", args=[row.pk])
    page = admin_client.get(url)
    assert page.status_code == 200 and page.context["has_change_permission"] is False
    assert admin_client.post(url, {}).status_code == 403
    assert admin_client.get(reverse(f"admin:shows_{model}_add")).status_code == 403


def test_a_move_to_scheduler_redis_cannot_take_is_reported_and_changes_nothing(
    admin_client,
    cuebot_farm,
    settings,
    fresh_accounting_client,
    django_capture_on_commit_callbacks,
):
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            CHANGELIST,
            {
                "action": "move_to_scheduler",
                ACTION_CHECKBOX_NAME: [cuebot_farm.show.pk],
                "confirmed": "yes",
            },
            follow=True,
        )
    assert flags(cuebot_farm.show) == [False]
    [refused] = response.context["messages"]  # no success line beside it
    assert refused.level_tag == "error"
    assert str(refused).startswith(f"Not moved, nothing changed: {cuebot_farm.show.str_name} (the show's Redis keys")
