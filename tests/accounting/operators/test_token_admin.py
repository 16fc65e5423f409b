"""The token admin cannot widen anyone's rights: the revoke action needs the change right, and
a token's user is fixed once it is issued (a token moved to another user would act with that
user's permissions)."""

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from accounting.models import ApiToken
from accounting.operators.auth import issue_token

pytestmark = pytest.mark.django_db


def staff_with(django_user_model, *codenames: str):
    user = django_user_model.objects.create_user(username="staffer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="accounting", codename__in=codenames))
    client = Client()
    client.force_login(user)
    return user, client


def test_a_viewer_of_tokens_is_not_offered_revoke_and_cannot_post_it(django_user_model):
    root = django_user_model.objects.create_superuser(username="root")
    issue_token(user=root)
    _, client = staff_with(django_user_model, "view_apitoken")

    page = client.get("/admin/accounting/apitoken/")
    assert page.status_code == 200 and 'value="revoke"' not in page.content.decode()
    client.post("/admin/accounting/apitoken/", {"action": "revoke", "_selected_action": [ApiToken.objects.get().pk]})

    assert ApiToken.objects.get().revoked_at is None


def test_a_holder_of_the_change_right_revokes(django_user_model):
    issue_token(user=django_user_model.objects.create_superuser(username="root"))
    _, client = staff_with(django_user_model, "view_apitoken", "change_apitoken")

    assert 'value="revoke"' in client.get("/admin/accounting/apitoken/").content.decode()
    client.post("/admin/accounting/apitoken/", {"action": "revoke", "_selected_action": [ApiToken.objects.get().pk]})

    assert ApiToken.objects.get().revoked_at is not None


def test_a_tokens_user_cannot_be_changed_to_another(django_user_model):
    root = django_user_model.objects.create_superuser(username="root")
    user, client = staff_with(django_user_model, "view_apitoken", "change_apitoken")
    issue_token(user=user, name="mine")
    token = ApiToken.objects.get()

    form = client.get(f"/admin/accounting/apitoken/{token.pk}/change/").content.decode()
    assert 'name="user"' not in form
    client.post(f"/admin/accounting/apitoken/{token.pk}/change/", {"user": root.pk, "name": "mine"})

    assert ApiToken.objects.get().user_id == user.pk
