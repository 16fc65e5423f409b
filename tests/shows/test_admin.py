import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth.models import Permission
from django.urls import reverse

from accounting import switching
from shows.models import Show

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
        response = admin_client.post(CHANGELIST, {
            "action": "move_to_scheduler", ACTION_CHECKBOX_NAME: [cuebot_farm.show.pk, farm.show.pk], "confirmed": "yes",
        }, follow=True)
    assert flags(cuebot_farm.show, farm.show) == [True, True]
    messages = [str(m) for m in response.context["messages"]]
    assert messages == [f"Moved 1 show(s) to the scheduler: {cuebot_farm.show.str_name}. 1 already there."]


def test_move_back_to_cuebot_once_confirmed(admin_client, farm, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(CHANGELIST, {
            "action": "move_back_to_cuebot", ACTION_CHECKBOX_NAME: [farm.show.pk], "confirmed": "yes",
        }, follow=True)
    assert flags(farm.show) == [False]
    assert [str(m) for m in response.context["messages"]] == [f"Moved 1 show(s) to Cuebot: {farm.show.str_name}. 0 already there."]


def test_a_user_without_change_permission_cannot_toggle(client, django_user_model, farm):
    viewer = django_user_model.objects.create_user(username="viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(*Permission.objects.filter(codename="view_show"))
    client.force_login(viewer)
    client.post(CHANGELIST, {"action": "move_back_to_cuebot", ACTION_CHECKBOX_NAME: [farm.show.pk], "confirmed": "yes"})
    assert flags(farm.show) == [True]


def test_show_list_reads_like_an_operator_and_links_managed_shows_to_their_drift(admin_client, farm, cuebot_farm):
    page = admin_client.get("/admin/shows/show/").content.decode()
    assert "Scheduler managed" in page and "B scheduler managed" not in page
    assert f"/admin/accounting/drift/{farm.show.id}/" in page
    assert f"/admin/accounting/drift/{cuebot_farm.show.id}/" not in page
    assert admin_client.get(f"/admin/accounting/drift/{farm.show.id}/").status_code == 200
