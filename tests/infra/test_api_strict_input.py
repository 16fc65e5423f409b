"""Input as strict as the schema says, and every error under /api/ in JSON (issue 21)."""

import json

import pytest

from accounting.models import JobResource, Proc
from infra.permissions import CHANGE_LIMITS, RELEASE_PROCS

pytestmark = pytest.mark.django_db


@pytest.fixture
def token(token_with) -> str:
    return token_with(RELEASE_PROCS, CHANGE_LIMITS)


def send(client, method: str, url: str, body: str, token: str, content_type: str = "application/json"):
    return getattr(client, method)(url, data=body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}")


@pytest.mark.parametrize("number", ["1.0", "1e3", "5.5", "true", '"5"'])
def test_a_count_field_takes_json_integers_only(client, farm, token, number):
    """Counts (GPUs, priorities) are whole; cores take decimals (test_cores_policy)."""
    response = send(
        client, "patch", f"/api/v1/accounting/jobs/{farm.job.id}/limits", f'{{"max_gpus": {number}}}', token
    )
    assert response.status_code == 422 and "must be a JSON integer" in response.content.decode()
    assert JobResource.objects.get(job=farm.job).int_max_gpus == 100


@pytest.mark.parametrize("body", ['{"proc_ids": [1.5]}', '{"proc_ids": [1e3]}'])
def test_a_number_is_no_proc_id(api_client, farm, token, body):
    """Numbers with a fraction reach endpoints as written (JsonNumber), never as text."""
    proc = farm.add_proc()
    response = send(api_client, "post", "/api/v1/procs/unbook", body, token)
    assert response.status_code == 422
    assert Proc.objects.filter(pk=proc.pk).exists()


def test_an_unknown_field_of_a_batch_release_is_refused_and_nothing_is_released(api_client, farm, token):
    proc = farm.add_proc()
    response = send(
        api_client, "post", "/api/v1/procs/unbook", json.dumps({"proc_ids": [proc.id], "dry_run": True}), token
    )
    assert response.status_code == 422 and "dry_run" in response.content.decode()
    assert Proc.objects.filter(pk=proc.pk).exists()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_declared_json_is_refused_with_415(api_client, farm, token, content_type):
    proc = farm.add_proc()
    response = send(
        api_client,
        "post",
        "/api/v1/procs/unbook",
        json.dumps({"proc_ids": [proc.id]}),
        token,
        content_type=content_type,
    )
    assert response.status_code == 415
    assert response.json() == {"detail": f"the body must be application/json, not {content_type}"}
    assert Proc.objects.filter(pk=proc.pk).exists()


def test_deep_nesting_is_a_422_in_json(api_client, farm, token):
    body = '{"proc_ids": ' + "[" * 100_000 + "]" * 100_000 + "}"
    response = send(api_client, "post", "/api/v1/procs/unbook", body, token)
    assert response.status_code == 422 and response.json()["detail"] == "malformed JSON body: nested too deeply"


def test_a_method_the_path_does_not_take_is_a_json_405(api_client, token):
    response = api_client.delete("/api/v1/procs/unbook", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 405 and response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "method DELETE not allowed here"} and "POST" in response["Allow"]


def test_pages_outside_the_api_keep_their_own_errors(client):
    assert client.delete("/healthz").status_code == 405
    assert not client.delete("/healthz")["Content-Type"].startswith("application/json")
