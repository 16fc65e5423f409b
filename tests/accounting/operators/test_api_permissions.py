"""What a token may do follows its user's Django permissions (infra.permissions): 401
without a valid token, 403 naming the missing permission, and nothing changes."""

import json
from datetime import date, timedelta

import pytest
from django.contrib.auth.models import Group, Permission

from accounting.models import Point, Proc, Subscription
from accounting.operators.auth import issue_token
from accounting.ownership import switching
from infra.permissions import (
    CHANGE_LIMITS,
    CHANGE_OWNERSHIP,
    RELEASE_PROCS,
    RESEED_REDIS,
    VIEW_ACCOUNTING,
)
from shows.models import Show

ALL = (RELEASE_PROCS, CHANGE_LIMITS, CHANGE_OWNERSHIP, RESEED_REDIS, VIEW_ACCOUNTING)

# (method, url, body, the permission it needs); {placeholders} name rows of the farm.
ENDPOINTS = [
    ("post", "/api/v1/procs/{proc}/unbook", None, RELEASE_PROCS),
    ("post", "/api/v1/procs/unbook", {"proc_ids": ["{proc}"]}, RELEASE_PROCS),
    ("patch", "/api/v1/accounting/subscriptions/{sub}/limits", {"size": 5}, CHANGE_LIMITS),
    ("patch", "/api/v1/accounting/folders/{folder}/limits", {"max_cores": 5}, CHANGE_LIMITS),
    ("patch", "/api/v1/accounting/jobs/{job}/limits", {"max_cores": 5}, CHANGE_LIMITS),
    ("patch", "/api/v1/accounting/points/{point}/limits", {"min_cores": 5}, CHANGE_LIMITS),
    ("put", "/api/v1/shows/{show}/scheduler-managed", {"managed": False}, CHANGE_OWNERSHIP),
    ("get", "/api/v1/shows", None, VIEW_ACCOUNTING),
    ("get", "/api/v1/shows/{show}", None, VIEW_ACCOUNTING),
    ("get", "/api/v1/accounting/drift", None, VIEW_ACCOUNTING),
    ("get", "/api/v1/locks", None, VIEW_ACCOUNTING),
    ("get", "/api/v1/usage?since={since}&until={until}", None, VIEW_ACCOUNTING),
]


def call(client, farm, method: str, url: str, body, token: str | None):
    names = {
        "proc": farm.procs[0].id,
        "sub": farm.subscription.id,
        "folder": farm.folder.id,
        "job": farm.job.id,
        "point": Point.objects.get(show=farm.show, dept=farm.dept).id,
        "show": farm.show.str_name,
        "since": (date.today() - timedelta(days=1)).isoformat(),
        "until": date.today().isoformat(),
    }
    data = json.dumps(body).replace('"{proc}"', json.dumps(names["proc"])) if body is not None else None
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return getattr(client, method)(url.format(**names), data=data, content_type="application/json", **headers)


def unchanged(farm) -> bool:
    return (
        Proc.objects.filter(pk=farm.procs[0].pk).exists()
        and Subscription.objects.get(pk=farm.subscription.pk).int_size == farm.subscription.int_size
        and Show.objects.get(pk=farm.show.pk).b_scheduler_managed
    )


@pytest.fixture
def permission_farm(farm):
    farm.procs = [farm.add_proc(cores=100)]
    Point.objects.get_or_create(show=farm.show, dept=farm.dept)
    return farm


@pytest.mark.parametrize(("method", "url", "body", "needed"), ENDPOINTS)
def test_every_other_permission_is_not_enough(api_client, permission_farm, token_with, method, url, body, needed):
    response = call(api_client, permission_farm, method, url, body, token_with(*(p for p in ALL if p != needed)))
    assert response.status_code == 403
    assert response.json() == {"detail": f"this token's user lacks the permission {needed}", "permission": needed}
    assert unchanged(permission_farm)


@pytest.mark.parametrize(("method", "url", "body", "needed"), ENDPOINTS)
def test_the_needed_permission_alone_is_enough(
    api_client, permission_farm, token_with, method, url, body, needed, django_capture_on_commit_callbacks, monkeypatch
):
    monkeypatch.setattr(switching, "seed_show", lambda *, show_id: None)
    with django_capture_on_commit_callbacks(execute=True):
        response = call(api_client, permission_farm, method, url, body, token_with(needed))
    assert response.status_code == 200, response.content


@pytest.mark.parametrize(("method", "url", "body", "needed"), ENDPOINTS)
@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_no_valid_token_is_401(client, permission_farm, method, url, body, needed, token):
    response = call(client, permission_farm, method, url, body, token)
    assert response.status_code == 401 and response.json() == {"detail": "Unauthorized"}
    assert unchanged(permission_farm)


def test_a_release_only_token_releases_but_cannot_change_limits_or_ownership(client, permission_farm, token_with):
    token = token_with(RELEASE_PROCS)
    for method, url, body, needed in ENDPOINTS[2:]:
        assert call(client, permission_farm, method, url, body, token).status_code == 403
    assert unchanged(permission_farm)
    assert call(client, permission_farm, *ENDPOINTS[0][:3], token).status_code == 200
    assert not Proc.objects.filter(pk=permission_farm.procs[0].pk).exists()


def test_a_superuser_token_may_do_everything(client, permission_farm, django_user_model):
    token = issue_token(user=django_user_model.objects.create_superuser(username="root"))
    response = call(client, permission_farm, *ENDPOINTS[2][:3], token)
    assert response.status_code == 200


def test_the_permission_is_granted_through_a_group_like_any_django_permission(
    client, permission_farm, django_user_model
):
    group = Group.objects.create(name="operators")
    group.permissions.add(Permission.objects.get(content_type__app_label="accounting", codename="change_limits"))
    user = django_user_model.objects.create_user(username="in-group")
    user.groups.add(group)
    assert call(client, permission_farm, *ENDPOINTS[2][:3], issue_token(user=user)).status_code == 200


def test_the_openapi_schema_names_each_endpoints_permission(client, db):
    schema = client.get("/api/v1/openapi.json").json()
    for method, url, body, needed in ENDPOINTS:
        path = (
            url.split("?")[0]
            .replace("{proc}", "{proc_id}")
            .replace("{sub}", "{subscription_id}")
            .replace("{folder}", "{folder_id}")
            .replace("{job}", "{job_id}")
            .replace("{point}", "{point_id}")
            .replace("{show}", "{name}")
        )
        assert needed in schema["paths"][path][method]["description"], path
