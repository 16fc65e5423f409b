"""Text that PostgreSQL cannot store (a NUL character) is refused at the API's edge with a
422, on every endpoint that looks something up, and nothing changes (found by fuzzing the
OpenAPI schema: each of these answered 500)."""
import json

import pytest

from accounting.auth import issue_token
from accounting.models import Proc

NUL = "%00"


@pytest.fixture
def staff_token(django_user_model) -> str:
    return issue_token(user=django_user_model.objects.create_user(username="op", is_staff=True))


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url", "body"), [
    ("post", f"/api/v1/procs/a{NUL}b/unbook", None),
    ("get", f"/api/v1/shows/a{NUL}b", None),
    ("put", f"/api/v1/shows/a{NUL}b/scheduler-managed", {"managed": True}),
    ("get", f"/api/v1/accounting/drift?show=a{NUL}b", None),
    ("patch", f"/api/v1/accounting/subscriptions/a{NUL}b/limits", {"size": 1}),
    ("patch", f"/api/v1/accounting/folders/a{NUL}b/limits", {"max_cores": 1}),
    ("patch", f"/api/v1/accounting/jobs/a{NUL}b/limits", {"max_cores": 1}),
    ("patch", f"/api/v1/accounting/points/a{NUL}b/limits", {"min_cores": 1}),
])
def test_a_nul_character_in_a_path_or_query_is_a_422(client, staff_token, method, url, body):
    data = json.dumps(body) if body is not None else None
    response = getattr(client, method)(url, data=data, content_type="application/json",
                                       HTTP_AUTHORIZATION=f"Bearer {staff_token}")
    assert response.status_code == 422, response.content
    assert "NUL" in response.content.decode()


@pytest.mark.django_db
def test_a_nul_character_in_a_batch_is_a_422_and_releases_nothing(client, farm, staff_token):
    proc = farm.add_proc(cores=100)
    response = client.post("/api/v1/procs/unbook", data=json.dumps({"proc_ids": [proc.id, "a\u0000b"]}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {staff_token}")
    assert response.status_code == 422
    assert Proc.objects.filter(pk=proc.pk).exists()
