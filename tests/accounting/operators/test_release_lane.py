"""The release lane (accounting.operators.release_lane): Cuebot's releases answered ahead of Django,
as Django answers them, and everything else handed to Django untouched."""

import ast
import json
import logging
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import connections
from django.test import RequestFactory

import accounting.operators.release_lane
from accounting.models import Proc
from accounting.operators.release_lane import (
    REPEATED,
    REVIEWED_MIDDLEWARE,
    REVIEWED_SETTINGS,
    ReleaseLane,
    off_because,
)
from infra.permissions import RELEASE_PROCS, VIEW_ACCOUNTING
from tests.wsgi_client import wsgi_call


class Recorded:
    """Django's WSGIHandler, and whether the lane handed it the request."""

    def __init__(self) -> None:
        self.handler = WSGIHandler()
        self.calls = 0

    def __call__(self, environ, start_response):
        self.calls += 1
        return self.handler(environ, start_response)


@pytest.fixture
def token(token_with) -> str:
    return token_with(RELEASE_PROCS)


def environ(path: str, *, token: str | None, body: bytes = b"", content_type: str = "application/json", **headers):
    sent = {"Host": "testserver", **({"Authorization": f"Bearer {token}"} if token else {}), **headers}
    return RequestFactory().generic("POST", path, body, content_type, headers=sent).environ


def served(environ_: dict) -> tuple[object, bool]:
    """The answer through a lane over Django, and whether the lane answered it itself."""
    django = Recorded()
    answer = wsgi_call(ReleaseLane(django), environ_)
    return answer, django.calls == 0


def by_django(environ_: dict):
    return wsgi_call(WSGIHandler(), environ_)


def with_proc(answer, proc_id: str, instead: str) -> tuple[int, list, bytes]:
    return answer.status_code, answer.header_list, answer.content.replace(proc_id.encode(), instead.encode())


@pytest.mark.parametrize("kind", ["single", "single not found", "batch"])
def test_the_lane_answers_a_release_as_django_does_byte_for_byte(farm, token, kind):
    mine, twin = farm.add_proc(cores=250, gpus=1), farm.add_proc(cores=250, gpus=1)

    def request(proc_id: str) -> dict:
        if kind == "batch":
            body = json.dumps({"proc_ids": [proc_id, "no-such-proc"]}).encode()
            return environ("/api/v1/procs/unbook", token=token, body=body)
        return environ(f"/api/v1/procs/{proc_id if kind == 'single' else proc_id + '-gone'}/unbook", token=token)

    lane_answer, taken = served(request(mine.id))
    django_answer = by_django(request(twin.id))

    assert taken
    assert lane_answer.status_code == (404 if kind == "single not found" else 200)
    assert with_proc(lane_answer, mine.id, "P") == with_proc(django_answer, twin.id, "P")
    assert Proc.objects.filter(pk__in=[mine.id, twin.id]).count() == (2 if kind == "single not found" else 0)


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=UTF-8", "Application/JSON"])
def test_a_batch_is_taken_whatever_the_json_content_types_parameters(farm, token, content_type):
    proc = farm.add_proc()
    body = json.dumps({"proc_ids": [proc.id]}).encode()

    answer, taken = served(environ("/api/v1/procs/unbook", token=token, body=body, content_type=content_type))

    assert (taken, answer.status_code) == (True, 200)
    assert answer.json()["results"][0]["status"] == "released"


def test_over_https_the_lane_adds_hsts_as_django_does(farm, token, settings):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS, settings.SECURE_HSTS_INCLUDE_SUBDOMAINS, settings.SECURE_HSTS_PRELOAD = 60, True, True
    mine, twin = farm.add_proc(), farm.add_proc()
    https = {"X-Forwarded-Proto": "https"}

    lane_answer, taken = served(environ(f"/api/v1/procs/{mine.id}/unbook", token=token, **https))
    django_answer = by_django(environ(f"/api/v1/procs/{twin.id}/unbook", token=token, **https))

    assert taken
    assert lane_answer["Strict-Transport-Security"] == "max-age=60; includeSubDomains; preload"
    assert with_proc(lane_answer, mine.id, "P") == with_proc(django_answer, twin.id, "P")


def refusals(proc_id: str, token: str, reader: str) -> dict[str, tuple[dict, int]]:
    """Requests the lane must hand to Django, each with the status Django answers."""
    one, many = f"/api/v1/procs/{proc_id}/unbook", "/api/v1/procs/unbook"
    body = json.dumps({"proc_ids": [proc_id]}).encode()
    return {
        "no token": (environ(one, token=None), 401),
        "unknown token": (environ(one, token="not-a-token"), 401),
        "other scheme": (environ(one, token=None, Authorization=f"Basic {token}"), 401),
        "token without the permission": (environ(one, token=reader), 403),
        "batch, token without the permission": (environ(many, token=reader, body=body), 403),
        "NUL in the id": (environ("/api/v1/procs/a\x00b/unbook", token=token), 422),
        "not JSON": (environ(many, token=token, body=body, content_type="text/plain"), 415),
        "malformed JSON": (environ(many, token=token, body=b'{"proc_ids": ['), 422),
        "unknown field": (environ(many, token=token, body=json.dumps({"proc_ids": [proc_id], "x": 1}).encode()), 422),
        "repeated id": (environ(many, token=token, body=json.dumps({"proc_ids": [proc_id, proc_id]}).encode()), 422),
        "too large": (environ(many, token=token, body=b" " * 3_000_000 + body), 413),
        "host not allowed": (environ(one, token=token, Host="evil.example"), 400),
    }


REFUSALS = list(refusals("p", "t", "r"))


@pytest.mark.parametrize("refusal", REFUSALS)
def test_what_the_api_would_refuse_goes_to_django_and_is_answered_as_before(farm, token, token_with, refusal):
    proc = farm.add_proc()
    reader = token_with(VIEW_ACCOUNTING)
    lane_request, status = refusals(proc.id, token, reader)[refusal]
    django_request, _ = refusals(proc.id, token, reader)[refusal]

    lane_answer, taken = served(lane_request)

    assert not taken
    assert lane_answer.status_code == status
    assert (lane_answer.status_code, lane_answer.header_list, lane_answer.content) == (
        (answer := by_django(django_request)).status_code,
        answer.header_list,
        answer.content,
    )
    assert Proc.objects.filter(pk=proc.id).exists()


@pytest.mark.parametrize("kind", ["single", "batch"])
def test_an_observers_refusal_is_answered_by_the_lane_as_django_answers_it(farm, token, settings, kind):
    proc = farm.add_proc()
    body = json.dumps({"proc_ids": [proc.id]}).encode()
    settings.ACCOUNTING_WRITES = False

    def request() -> dict:
        if kind == "batch":
            return environ("/api/v1/procs/unbook", token=token, body=body)
        return environ(f"/api/v1/procs/{proc.id}/unbook", token=token)

    lane_answer, taken = served(request())
    django_answer = by_django(request())

    assert taken
    assert lane_answer.status_code == 403 and lane_answer.json()["setting"] == "ACCOUNTING_WRITES"
    assert (lane_answer.status_code, lane_answer.header_list, lane_answer.content) == (
        django_answer.status_code,
        django_answer.header_list,
        django_answer.content,
    )
    assert Proc.objects.filter(pk=proc.id).exists()


def test_a_plain_http_release_is_left_to_django_where_https_is_required(farm, token, settings):
    settings.SECURE_SSL_REDIRECT = True
    proc = farm.add_proc()

    answer, taken = served(environ(f"/api/v1/procs/{proc.id}/unbook", token=token))

    assert not taken
    assert answer.status_code == 301 and answer["Location"].startswith("https://")
    assert Proc.objects.filter(pk=proc.id).exists()


def test_other_methods_and_paths_go_to_django(farm, token):
    proc = farm.add_proc()
    get = RequestFactory().get(f"/api/v1/procs/{proc.id}/unbook", headers={"Authorization": f"Bearer {token}"})
    nested = environ(f"/api/v1/procs/{proc.id}/x/unbook", token=token)

    for request, status in ((get.environ, 405), (nested, 404)):
        answer, taken = served(request)
        assert (taken, answer.status_code) == (False, status)
    assert Proc.objects.filter(pk=proc.id).exists()


def test_a_lane_request_is_one_request_to_djangos_signals(farm, token):
    proc = farm.add_proc()
    sent = []

    def started(sender, **kwargs):
        sent.append("started")

    def finished(sender, **kwargs):
        sent.append("finished")

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        _, taken = served(environ(f"/api/v1/procs/{proc.id}/unbook", token=token))
        _, refused_taken = served(environ(f"/api/v1/procs/{proc.id}/unbook", token="not-a-token"))
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)

    # A refused token is checked after the lane's request_started: it ends that request before Django starts its own.
    assert (taken, refused_taken) == (True, False)
    assert sent == ["started", "finished", "started", "finished", "started", "finished"]


def test_an_unexpected_error_is_logged_and_answered_500_as_the_api_answers_it(
    farm, token, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    proc = farm.add_proc()

    def broken(*, proc_id: str):
        raise RuntimeError("names unreadable")

    monkeypatch.setattr(accounting.operators.release_lane, "released_one", broken)
    with caplog.at_level(logging.ERROR, logger="infra.api"):
        answer, taken = served(environ(f"/api/v1/procs/{proc.id}/unbook", token=token))

    assert taken
    assert answer.status_code == 500
    assert answer.json() == {"detail": "internal server error; see the service's log"}
    assert f"unexpected error on POST /api/v1/procs/{proc.id}/unbook" in caplog.text
    assert "names unreadable" in caplog.text


class Stamp:
    """A middleware a project might add one day (a request id, an audit trail, a rate limit): it
    stamps every answer it sees."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        response["X-Stamp"] = "seen"
        return response


def appended(settings, monkeypatch) -> str:
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, f"{__name__}.Stamp"]
    return f"adds {__name__}.Stamp"


def reordered(settings, monkeypatch) -> str:
    # XFrameOptionsMiddleware outermost: its header would come last in Django's answer.
    frames = "django.middleware.clickjacking.XFrameOptionsMiddleware"
    settings.MIDDLEWARE = [frames, *(name for name in settings.MIDDLEWARE if name != frames)]
    return "its order differs"


def atomic_requests(settings, monkeypatch) -> str:
    # Where Django's handler reads it (the connection's settings, the same dict as DATABASES').
    monkeypatch.setitem(connections.settings["default"], "ATOMIC_REQUESTS", True)
    return "ATOMIC_REQUESTS is on for default"


def user_agents_refused(settings, monkeypatch) -> str:
    settings.DISALLOWED_USER_AGENTS = ["^curl/"]
    return "DISALLOWED_USER_AGENTS is"


STACKS = {
    "a middleware appended": appended,
    "a middleware moved": reordered,
    "ATOMIC_REQUESTS": atomic_requests,
    "a setting away from its reviewed value": user_agents_refused,
}


def lane_warnings() -> list:
    """What `manage.py check --deploy` says of the lane."""
    return [m for m in run_checks(include_deployment_checks=True) if m.id == "accounting.W002"]


@pytest.mark.parametrize("stack", STACKS)
def test_a_stack_the_lane_was_not_reviewed_against_turns_it_off_and_django_answers_every_release(
    farm, token, settings, monkeypatch, caplog, stack
):
    reason = STACKS[stack](settings, monkeypatch)
    one, many = farm.add_proc(cores=100), farm.add_proc(cores=200)
    batch = json.dumps({"proc_ids": [many.id]}).encode()

    with caplog.at_level(logging.WARNING, logger="accounting.operators.release_lane"):
        single_answer, single_taken = served(environ(f"/api/v1/procs/{one.id}/unbook", token=token))
    batch_answer, batch_taken = served(environ("/api/v1/procs/unbook", token=token, body=batch))

    assert (single_taken, batch_taken) == (False, False)
    assert (single_answer.status_code, batch_answer.status_code) == (200, 200)
    assert batch_answer.json()["results"][0]["status"] == "released"
    assert not Proc.objects.filter(pk__in=[one.id, many.id]).exists()
    if stack == "a middleware appended":  # what the lane would have left out
        assert single_answer["X-Stamp"] == batch_answer["X-Stamp"] == "seen"
    (warning,) = lane_warnings()
    assert reason in warning.hint and warning.msg.startswith("The release lane is off")
    assert f"the release lane is off, Django answers every release: {off_because()[0]}" in caplog.text


def test_with_the_projects_stack_the_lane_is_on_and_no_check_warns(farm, token, settings):
    assert list(settings.MIDDLEWARE) == list(REVIEWED_MIDDLEWARE)
    assert off_because() == []
    assert lane_warnings() == []
    _, taken = served(environ(f"/api/v1/procs/{farm.add_proc().id}/unbook", token=token))
    assert taken


def test_every_setting_the_lane_reads_is_recorded_with_what_it_was_reviewed_at():
    tree = ast.parse(Path(accounting.operators.release_lane.__file__).read_text())
    read = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "settings"
    } | {
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id == "settings"
        and isinstance(node.args[1], ast.Constant)
    }
    # The others are read through REVIEWED_SETTINGS itself, held to their one value.
    assert read == {"MIDDLEWARE", *(name for name, value in REVIEWED_SETTINGS.items() if value is REPEATED)}
