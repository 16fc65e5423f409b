"""Admin logins are throttled (django-axes): wrong passwords for one username from one address
lock that pair out, the right password included, until the cool-off (issue 21)."""

import pytest
from django.conf import settings

pytestmark = pytest.mark.django_db


def login(client, username: str, password: str):
    return client.post("/admin/login/?next=/admin/", {"username": username, "password": password})


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user(username="operator", password="right-one", is_staff=True)


def test_wrong_passwords_lock_the_username_out_the_right_one_included(client, operator):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert login(client, "operator", "wrong").status_code == 200  # the form again, with its error
    assert login(client, "operator", "wrong").status_code == 429  # the limit-th failure locks
    locked = login(client, "operator", "right-one")
    assert locked.status_code == 429
    assert "_auth_user_id" not in client.session


def test_a_success_before_the_limit_resets_the_count(client, operator):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        login(client, "operator", "wrong")
    assert login(client, "operator", "right-one").status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        login(client, "operator", "wrong")
    assert login(client, "operator", "right-one").status_code == 302


def test_another_username_is_not_locked_out(client, operator, django_user_model):
    django_user_model.objects.create_user(username="other", password="theirs", is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT):
        login(client, "operator", "wrong")
    assert login(client, "other", "theirs").status_code == 302
