import json

import pytest

from accounting.ownership import switching
from infra.permissions import (
    CHANGE_LIMITS,
    CHANGE_OWNERSHIP,
    RELEASE_PROCS,
    RESEED_REDIS,
)
from shows.models import Show
from tests.processes import closed_port

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_real_seeding(monkeypatch):
    monkeypatch.setattr(switching, "seed_show", lambda *, show_id: None)


@pytest.fixture
def staff_token(token_with) -> str:
    return token_with(CHANGE_OWNERSHIP)


@pytest.fixture
def plain_token(token_with) -> str:
    """Every other right: none of them is the right to move a show."""
    return token_with(RELEASE_PROCS, CHANGE_LIMITS, RESEED_REDIS)


def put(client, name: str, body, token: str | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, str) else json.dumps(body)
    return client.put(f"/api/v1/shows/{name}/scheduler-managed", data=data, content_type="application/json", **headers)


def flag(show) -> bool:
    return Show.objects.get(pk=show.pk).b_scheduler_managed


def test_list_and_detail_carry_the_flag(reader_client, farm, cuebot_farm):
    client = reader_client
    listed = client.get("/api/v1/shows").json()
    assert {s["name"]: s["scheduler_managed"] for s in listed} == {
        farm.show.str_name: True,
        cuebot_farm.show.str_name: False,
    }
    detail = client.get(f"/api/v1/shows/{farm.show.str_name}")
    assert detail.status_code == 200
    assert detail.json() == {"id": farm.show.id, "name": farm.show.str_name, "scheduler_managed": True, "active": True}


def test_detail_of_an_unknown_show_is_404(reader_client, db):
    response = reader_client.get("/api/v1/shows/nope")
    assert response.status_code == 404 and "nope" in response.json()["detail"]


def test_staff_token_moves_a_show_and_gets_old_and_new(
    reader_client, cuebot_farm, staff_token, django_capture_on_commit_callbacks
):
    client = reader_client
    with django_capture_on_commit_callbacks(execute=True):
        response = put(client, cuebot_farm.show.str_name, {"managed": True}, staff_token)
    assert response.status_code == 200
    assert response.json() == {"name": cuebot_farm.show.str_name, "old": False, "new": True}
    assert flag(cuebot_farm.show) is True
    assert client.get(f"/api/v1/shows/{cuebot_farm.show.str_name}").json()["scheduler_managed"] is True


def test_a_move_to_scheduler_redis_cannot_take_is_503_and_changes_nothing(
    reader_client,
    cuebot_farm,
    staff_token,
    settings,
    fresh_accounting_client,
    django_capture_on_commit_callbacks,
):
    settings.ACCOUNTING_REDIS_URL = f"redis://127.0.0.1:{closed_port()}/0"
    with django_capture_on_commit_callbacks(execute=True):
        response = put(reader_client, cuebot_farm.show.str_name, {"managed": True}, staff_token)
    assert response.status_code == 503
    assert "could not be closed before the switch" in response.json()["detail"]
    assert flag(cuebot_farm.show) is False


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_no_or_invalid_token_is_401(client, cuebot_farm, token):
    response = put(client, cuebot_farm.show.str_name, {"managed": True}, token)
    assert response.status_code == 401 and response.json()["detail"]
    assert flag(cuebot_farm.show) is False


def test_a_token_without_change_ownership_is_403_even_with_a_bad_body(client, cuebot_farm, plain_token):
    for body in ({"managed": True}, {"managed": "maybe"}):
        response = put(client, cuebot_farm.show.str_name, body, plain_token)
        assert response.status_code == 403 and response.json()["permission"] == CHANGE_OWNERSHIP
        assert CHANGE_OWNERSHIP in response.json()["detail"]
    assert flag(cuebot_farm.show) is False


def test_unknown_show_is_404(client, staff_token, db):
    response = put(client, "nope", {"managed": True}, staff_token)
    assert response.status_code == 404 and "nope" in response.json()["detail"]


@pytest.mark.parametrize(
    "body", [{}, {"managed": "true"}, {"managed": 1}, {"managed": None}, {"managed": True, "drain": True}, "[true]"]
)
def test_bad_body_is_422_and_changes_nothing(client, cuebot_farm, staff_token, body):
    response = put(client, cuebot_farm.show.str_name, body, staff_token)
    assert response.status_code == 422, response.content
    assert response.json()["detail"]
    assert flag(cuebot_farm.show) is False


def test_a_body_that_is_not_json_at_all_is_422_and_changes_nothing(client, cuebot_farm, staff_token):
    response = put(client, cuebot_farm.show.str_name, "not json", staff_token)
    assert response.status_code == 422 and response.json()["detail"]
    assert flag(cuebot_farm.show) is False
