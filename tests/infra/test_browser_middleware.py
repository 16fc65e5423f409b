"""A request under /api/ with a bearer token runs none of the browser middleware (sessions, the
session's user, messages); every other request runs all of it (issue 35)."""

import json

import pytest
from django.contrib.sessions.models import Session
from django.db import connection
from django.test.utils import CaptureQueriesContext

from infra.permissions import RELEASE_PROCS


@pytest.fixture
def token(token_with) -> str:
    return token_with(RELEASE_PROCS)


def release(client, proc_id: str, headers: dict):
    return client.post(
        f"/api/v1/procs/{proc_id}/unbook", data=json.dumps({}), content_type="application/json", headers=headers
    )


def test_a_token_release_builds_no_session_user_or_messages(farm, client, token, admin_user):
    # A browser's cookies beside the token: a logged-in session and a CSRF cookie, as a
    # script run from an operator's machine might send.
    client.force_login(admin_user)
    client.cookies["csrftoken"] = "x" * 32
    proc = farm.add_proc(cores=100)
    sessions = Session.objects.count()

    response = release(client, proc.id, {"Authorization": f"Bearer {token}"})

    assert response.status_code == 200
    request = response.wsgi_request
    assert not hasattr(request, "session")
    assert not hasattr(request, "_messages")
    assert request.user.username.startswith("token-user-")  # the token's user, set by BearerToken alone
    assert "Set-Cookie" not in response.headers and "Cookie" not in response.get("Vary", "")
    assert Session.objects.count() == sessions


def test_a_token_release_reads_nothing_for_sessions_or_users(farm, client, token):
    release(client, farm.add_proc(cores=100).id, {"Authorization": f"Bearer {token}"})  # the token now cached
    with CaptureQueriesContext(connection) as queries:
        release(client, farm.add_proc(cores=100).id, {"Authorization": f"Bearer {token}"})
    touched = " ".join(q["sql"] for q in queries.captured_queries)
    assert "django_session" not in touched and "auth_user" not in touched and "api_token" not in touched


# The header read by the API's one parser (infra.api_types.bearer_token), as django-ninja reads
# it: the scheme in any case, and a bare scheme is an empty token, which the endpoint refuses.
@pytest.mark.parametrize("authorization", ["bearer not-a-token", "BEARER not-a-token", "Bearer"])
def test_a_wrong_token_is_401_with_no_session_either(db, client, authorization):
    response = release(client, "anything", {"Authorization": authorization})
    assert response.status_code == 401
    assert not hasattr(response.wsgi_request, "session")


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Basic dXNlcjpwYXNz"}])
def test_an_api_request_without_a_bearer_token_runs_the_browser_middleware(db, client, headers):
    response = release(client, "anything", headers)
    assert response.status_code == 401
    request = response.wsgi_request
    assert hasattr(request, "session") and hasattr(request, "_messages") and hasattr(request, "user")


def test_the_admin_keeps_its_session_and_csrf_cookie(db, client):
    response = client.get("/admin/login/")
    assert response.status_code == 200
    assert hasattr(response.wsgi_request, "session")
    assert "csrftoken" in response.cookies
